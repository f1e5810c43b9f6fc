-- Make sure the lease's row exists; raise.sql then decides. Not INSERT
-- IGNORE, which would also turn other errors into warnings.
INSERT INTO {{table}} (lease, fence_token, owner_id, writes) VALUES (?, 0, '', 0)
ON DUPLICATE KEY UPDATE lease = lease
