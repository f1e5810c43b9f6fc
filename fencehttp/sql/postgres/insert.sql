-- Make sure the lease's row exists; raise.sql then decides. A concurrent
-- insert of the same lease makes this wait for that transaction.
INSERT INTO {{table}} (lease, fence_token, owner_id, writes) VALUES ($1, 0, '', 0)
ON CONFLICT (lease) DO NOTHING
