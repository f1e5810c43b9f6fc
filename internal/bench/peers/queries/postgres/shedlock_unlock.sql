-- ShedLock's unlock keeps the lock until locked_at + lockAtLeastFor ($2);
-- with 0 it ends now.
UPDATE {{table}}
SET lock_until = CASE
	WHEN locked_at + CAST($2 AS interval) > timezone('utc', CURRENT_TIMESTAMP) THEN locked_at + CAST($2 AS interval)
	ELSE timezone('utc', CURRENT_TIMESTAMP) END
WHERE name = $1 AND locked_by = $3
