-- Raise the lease's fence in the handler's transaction, refusing a lower
-- fence and an equal fence of another owner. The row lock is held until
-- the transaction ends, so a newer fence's request waits here for a stale
-- one that passed, and under READ COMMITTED re-checks the WHERE against
-- the row that transaction committed.
-- Parameters: fence, owner id, lease.
UPDATE {{table}} SET fence_token = $1, owner_id = $2, writes = writes + 1
WHERE lease = $3 AND (fence_token < $1 OR (fence_token = $1 AND owner_id = $2))
