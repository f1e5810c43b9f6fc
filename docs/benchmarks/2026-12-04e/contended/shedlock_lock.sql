-- ShedLock's lock on MariaDB (as internal/bench/peers/queries/mysql/shedlock_lock.sql, TTL 30 s inlined). Parameters: holder, name.
UPDATE zz_shed SET lock_until = TIMESTAMPADD(MICROSECOND, 30000000, UTC_TIMESTAMP(3)), locked_at = UTC_TIMESTAMP(3), locked_by = ? WHERE name = ? AND lock_until <= UTC_TIMESTAMP(3)
