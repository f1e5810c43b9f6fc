-- ShedLock's extend: only the holder, only while the lock has not run out.
UPDATE {{table}}
SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + CAST($2 AS interval)
WHERE name = $1 AND locked_by = $3 AND lock_until > timezone('utc', CURRENT_TIMESTAMP)
