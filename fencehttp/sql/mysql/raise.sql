-- Raise the lease's fence in the handler's transaction, refusing a lower
-- fence and an equal fence of another owner. UPDATE reads the latest
-- committed row (a locking read, also under REPEATABLE READ) and its row
-- lock is held until the transaction ends.
-- Parameters: fence, owner id, lease, fence, fence, owner id.
UPDATE {{table}} SET fence_token = ?, owner_id = ?, writes = writes + 1
WHERE lease = ? AND (fence_token < ? OR (fence_token = ? AND owner_id = ?))
