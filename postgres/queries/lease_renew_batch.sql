-- Renew many tokens in one statement. $1 names, $2 owners, $3 fences (arrays
-- of equal length), $4 ttl ms. Returns one row per input element, in input
-- order: leased_until_ms (NULL when refused) and now.
--
-- As in lease_renew_locked.sql, the rows are locked first and the clock is read once
-- after all of them are locked, so that no renew judges validity by a time
-- from before a lock wait. Rows are locked in name order, as the sweep locks
-- them, so two batches or a batch and a sweep cannot deadlock on each other.
--
-- The result joins back on the token rather than on the position: when a
-- token appears twice, UPDATE … FROM updates the row once and returns it
-- once, but both positions asked for the same valid token.
WITH req AS (
    SELECT r.lease_name, r.owner_token, r.fence_token, r.ord
    FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY
         AS r(lease_name, owner_token, fence_token, ord)
),
target AS MATERIALIZED (
    SELECT 1
    FROM {{prefix}}leases AS l
    JOIN req ON l.lease_name = req.lease_name AND l.owner_token = req.owner_token
            AND l.fence_token = req.fence_token
    ORDER BY l.lease_name
    FOR NO KEY UPDATE OF l
),
clock AS MATERIALIZED (
    SELECT {{now_ms}} AS now_ms FROM (SELECT count(*) FROM target) AS locked
),
renewed AS (
    UPDATE {{prefix}}leases AS l
    SET leased_until_ms = clock.now_ms + $4::bigint,
        updated_at_ms   = clock.now_ms,
        renew_count     = l.renew_count + 1
    FROM req, clock
    WHERE l.lease_name = req.lease_name AND l.owner_token = req.owner_token
      AND l.fence_token = req.fence_token AND l.leased_until_ms > clock.now_ms
    RETURNING l.lease_name::text, l.owner_token::text, l.fence_token, l.leased_until_ms
)
SELECT renewed.leased_until_ms, clock.now_ms
FROM req
CROSS JOIN clock
LEFT JOIN renewed ON renewed.lease_name = req.lease_name
                 AND renewed.owner_token = req.owner_token
                 AND renewed.fence_token = req.fence_token
ORDER BY req.ord
