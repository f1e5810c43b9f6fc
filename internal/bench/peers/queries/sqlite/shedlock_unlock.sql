-- ShedLock's unlock keeps the lock until locked_at + lockAtLeastFor (?2);
-- with 0 it ends now.
UPDATE {{table}}
SET lock_until = max(locked_at + ?2, CAST(unixepoch('subsec') * 1000 AS INTEGER))
WHERE name = ?1 AND locked_by = ?3
