-- The takeover of a lease whose row exists and has lapsed, as one plain
-- single-row UPDATE (LeaseAcquire runs it after lease_get.sql found the row
-- lapsed). The new fence comes back as the insert id of the OK packet
-- through LAST_INSERT_ID(expr): go-sql-driver's Result.LastInsertId reads it
-- from that packet, so the answer and the fence take one round trip, on
-- MySQL 8 and MariaDB alike (MariaDB's RETURNING does not exist for UPDATE).
-- A trigger on the table makes MariaDB send insert id 0; LeaseAcquire then
-- reads the row, which carries this call's owner token.
--
-- {{now}} is the statement's start, the same in every expression, as in
-- lease_acquire.sql: a statement that waited for the row lock judges expiry
-- at an earlier instant than it writes at, so it can only refuse a lease
-- that had just lapsed, and it grants a lease that ends a little early.
-- Both are safe. InnoDB evaluates the WHERE on the latest committed row once
-- it holds the row's lock, so a takeover or renewal that committed first
-- makes this match nothing (0 rows: LeaseAcquire then asks the upsert,
-- whose one statement answers either way).
-- The fence is at least {{floor_us}} (docs/adr/0004-fence-floor.md).
-- Parameters: owner, holder, ttl ms, name.
UPDATE {{prefix}}leases
SET owner_token     = ?,
    holder          = ?,
    fence_token     = LAST_INSERT_ID(GREATEST(fence_token + 1, {{floor_us}})),
    state           = 'held',
    acquired_at_ms  = {{now}},
    updated_at_ms   = {{now}},
    renew_count     = 0,
    leased_until_ms = {{now}} + ?
WHERE lease_name = ? AND leased_until_ms <= {{now}}
