-- ShedLock (usingDbTime) inserts a name once per process; after that it
-- only updates. A name inserted first by another process is left alone:
-- the update that follows decides. The TTL ($2) is in microseconds.
INSERT IGNORE INTO {{table}} (name, lock_until, locked_at, locked_by)
VALUES (?, TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)), UTC_TIMESTAMP(3), ?)
