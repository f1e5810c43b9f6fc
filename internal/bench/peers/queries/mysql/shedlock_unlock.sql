-- ShedLock's unlock keeps the lock until locked_at + lockAtLeastFor; with
-- 0 it ends now. Parameters: lockAtLeastFor in microseconds (twice), name,
-- holder.
UPDATE {{table}}
SET lock_until = IF(TIMESTAMPADD(MICROSECOND, ?, locked_at) > UTC_TIMESTAMP(3), TIMESTAMPADD(MICROSECOND, ?, locked_at), UTC_TIMESTAMP(3))
WHERE name = ? AND locked_by = ?
