-- ShedLock's lock on an existing row, by the database's clock. Parameters:
-- TTL in microseconds, holder, name.
UPDATE {{table}}
SET lock_until = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)), locked_at = UTC_TIMESTAMP(3), locked_by = ?
WHERE name = ? AND lock_until <= UTC_TIMESTAMP(3)
