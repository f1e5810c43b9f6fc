-- Make sure the lease's row exists; raise.sql then decides.
INSERT INTO {{table}} (lease, fence_token, owner_id, writes) VALUES (?, 0, '', 0)
ON CONFLICT (lease) DO NOTHING
