-- ShedLock's extend: only the holder, only while the lock has not run out.
UPDATE {{table}}
SET lock_until = CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?2
WHERE name = ?1 AND locked_by = ?3 AND lock_until > CAST(unixepoch('subsec') * 1000 AS INTEGER)
