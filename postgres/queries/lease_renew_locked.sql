-- Renew, locking the row before the clock is read: the fallback of
-- lease_renew.sql when that statement waited for the row and cannot tell
-- whether the lease was still valid after the wait. $1 name, $2 owner, $3
-- fence, $4 ttl ms.
--
-- The database clock is read once, after the row is locked. A renew can wait
-- for the row (a fenced transaction holds it FOR SHARE). When the holder of
-- that lock only locked the row, PostgreSQL does not re-check an UPDATE's
-- WHERE after the wait, so a clock read before the wait would let a renew
-- revive a lease that expired while it waited. target takes the row lock
-- first; clock reads the time only after target has produced all its rows
-- (the count); the UPDATE then judges the latest row version against that
-- instant (a row changed meanwhile is re-read by the UPDATE itself).
--
-- clock always has one row, so a refusal also reports the database now in
-- the same round trip.
WITH target AS MATERIALIZED (
    SELECT 1
    FROM {{prefix}}leases
    WHERE lease_name = $1::text AND owner_token = $2::text AND fence_token = $3::bigint
    FOR NO KEY UPDATE
),
clock AS MATERIALIZED (
    SELECT {{now_ms}} AS now_ms FROM (SELECT count(*) FROM target) AS locked
),
renewed AS (
    UPDATE {{prefix}}leases AS l
    SET leased_until_ms = clock.now_ms + $4::bigint,
        updated_at_ms   = clock.now_ms,
        renew_count     = l.renew_count + 1
    FROM clock
    WHERE l.lease_name = $1::text AND l.owner_token = $2::text AND l.fence_token = $3::bigint
      AND l.leased_until_ms > clock.now_ms
    RETURNING l.leased_until_ms
)
SELECT renewed.leased_until_ms, clock.now_ms
FROM clock LEFT JOIN renewed ON true
