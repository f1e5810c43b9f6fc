-- ShedLock's lock on an existing row, taken only when the previous lock has
-- run out.
UPDATE {{table}}
SET lock_until = CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?2,
	locked_at = CAST(unixepoch('subsec') * 1000 AS INTEGER),
	locked_by = ?3
WHERE name = ?1 AND lock_until <= CAST(unixepoch('subsec') * 1000 AS INTEGER)
