-- Raise the lease's fence in the handler's transaction, refusing a lower
-- fence and an equal fence of another owner. The write lock it takes is
-- held until the transaction ends (fence opens SQLite with
-- _txlock=immediate, so BEGIN already took it).
-- Parameters: fence, owner id, lease.
UPDATE {{table}} SET fence_token = ?1, owner_id = ?2, writes = writes + 1
WHERE lease = ?3 AND (fence_token < ?1 OR (fence_token = ?1 AND owner_id = ?2))
