-- ShedLock's extend: only the holder, only while the lock has not run out.
-- Parameters: TTL in microseconds, name, holder.
UPDATE {{table}}
SET lock_until = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3))
WHERE name = ? AND locked_by = ? AND lock_until > UTC_TIMESTAMP(3)
