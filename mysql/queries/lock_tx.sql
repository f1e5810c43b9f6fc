-- LOCK IN SHARE MODE: MariaDB has no FOR SHARE; MySQL 8 accepts both. The
-- share lock is held to the end of the caller's transaction, so a takeover
-- (which must update this row) waits for it, and a takeover that committed
-- first is seen: a locking read reads the latest committed row, not the
-- transaction's snapshot, under REPEATABLE READ too. The verdict is taken
-- when the lock is granted ({{exec_now}}), not when the statement began.
SELECT COUNT(*) FROM {{prefix}}leases
WHERE lease_name = ? AND owner_token = ? AND fence_token = ? AND leased_until_ms > {{exec_now}}
LOCK IN SHARE MODE
