-- ShedLock's lock on an existing row: taken only when the previous lock has
-- run out by the database's clock.
UPDATE {{table}}
SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + CAST($2 AS interval),
	locked_at = timezone('utc', CURRENT_TIMESTAMP),
	locked_by = $3
WHERE name = $1 AND lock_until <= timezone('utc', CURRENT_TIMESTAMP)
