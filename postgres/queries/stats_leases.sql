-- The first leases by name for a metrics scrape, with the number of lease
-- rows in all (so the scrape can say how many it left out) and each lease's
-- last succeeded run. The LEFT JOIN from clock returns the clock and the
-- count even when there are no leases or the limit is 0. The holder is its
-- name (schema v3), or for a row acquired before names were recorded the
-- first 8 characters of the owner token: the token is the holder's secret,
-- and no more of it leaves the database.
WITH clock AS (
    SELECT {{now_ms}} AS now_ms, (SELECT COUNT(*) FROM {{prefix}}leases) AS total
)
SELECT clock.now_ms, clock.total, l.lease_name, l.holder, l.fence_token, l.state,
       l.leased_until_ms, l.last_success_ms
FROM clock LEFT JOIN (
    SELECT x.lease_name, CASE WHEN x.holder <> '' THEN x.holder ELSE SUBSTR(x.owner_token, 1, 8) END AS holder, x.fence_token, x.state,
           x.leased_until_ms,
           COALESCE((SELECT MAX(r.finished_at_ms) FROM {{prefix}}runs AS r
                     WHERE r.lease_name = x.lease_name AND r.status = 'succeeded'), 0) AS last_success_ms
    FROM {{prefix}}leases AS x
    ORDER BY x.lease_name
    LIMIT $1::bigint
) AS l ON true
ORDER BY l.lease_name
