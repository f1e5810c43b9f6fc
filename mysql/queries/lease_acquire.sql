-- One statement, one round trip. The new fence comes back as the insert id
-- (MySQL has no RETURNING; MariaDB's would not give one path for both):
--
--   inserted:    LAST_INSERT_ID({{floor_us}}) in VALUES -> insert id = floor
--   taken over:  LAST_INSERT_ID(GREATEST(fence_token + 1, {{floor_us}}))
--                                                       -> insert id = new fence
--   held:        fence_token + LAST_INSERT_ID(0)        -> insert id 0
--
-- {{floor_us}} is the statement's start in microseconds: no new fence is
-- below the database clock, so a lease table restored from an older dump
-- still hands out fences above every fence handed out before the restore
-- (docs/adr/0004-fence-floor.md). It is never 0, so 0 still means "held".
--
-- The VALUES list is evaluated even when the row exists, so without the
-- LAST_INSERT_ID(0) on the held path the insert id would still be the floor
-- from VALUES and a held lease would read as "acquired" (measured on
-- MariaDB 10.11). The affected-row count cannot tell either: it is 1 for an
-- insert and, with CLIENT_FOUND_ROWS, also 1 for the unchanged held row.
-- MySQL 8 reports the last LAST_INSERT_ID(expr) of the statement in the OK
-- packet the same way (it is the documented ODKU idiom id = LAST_INSERT_ID(id)).
-- The table has no AUTO_INCREMENT column, so nothing else sets the insert id.
-- A trigger on the table makes MariaDB send insert id 0 whatever the path;
-- LeaseAcquire then reads the session's LAST_INSERT_ID() instead
-- (lease_acquire_outcome.sql).
--
-- Assignments run left to right and later ones see earlier new values, so
-- every IF tests only leased_until_ms and leased_until_ms is assigned last.
-- Unqualified columns in the UPDATE part are the existing row's.
-- VALUES(col) is deprecated in MySQL 8.0.20+ and the row alias that replaces
-- it does not exist in MariaDB, so owner, holder and ttl are bound twice
-- instead.
--
-- {{now}} is the statement's start time, the same for every IF. A statement
-- that waited for the row lock judges expiry at an earlier instant than the
-- one it writes at: it can only see a lease as still held that had just
-- lapsed, and it grants a lease that ends a little early. Both are safe.
-- (SYSDATE() would change between the IFs.)
INSERT INTO {{prefix}}leases
    (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, renew_count, holder)
VALUES (?, ?, LAST_INSERT_ID({{floor_us}}), 'held', {{now}} + ?, {{now}}, {{now}}, 0, ?)
ON DUPLICATE KEY UPDATE
    owner_token     = IF(leased_until_ms <= {{now}}, ?, owner_token),
    holder          = IF(leased_until_ms <= {{now}}, ?, holder),
    fence_token     = IF(leased_until_ms <= {{now}}, LAST_INSERT_ID(GREATEST(fence_token + 1, {{floor_us}})), fence_token + LAST_INSERT_ID(0)),
    state           = IF(leased_until_ms <= {{now}}, 'held', state),
    acquired_at_ms  = IF(leased_until_ms <= {{now}}, {{now}}, acquired_at_ms),
    updated_at_ms   = IF(leased_until_ms <= {{now}}, {{now}}, updated_at_ms),
    renew_count     = IF(leased_until_ms <= {{now}}, 0, renew_count),
    leased_until_ms = IF(leased_until_ms <= {{now}}, {{now}} + ?, leased_until_ms)
