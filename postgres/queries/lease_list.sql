-- One page of leases by name, judged against one instant so the page is one
-- consistent picture; the LEFT JOIN returns that instant even when there are
-- no rows. $1 the last name of the previous page ('' from the start; names
-- are never empty), $2 the limit (NULL for none).
WITH clock AS (
    SELECT {{now_ms}} AS now_ms
)
SELECT clock.now_ms, l.lease_name, l.owner_token, l.holder, l.fence_token, l.state,
       l.leased_until_ms, l.acquired_at_ms, l.updated_at_ms
FROM clock LEFT JOIN {{prefix}}leases AS l ON l.lease_name > $1::text
ORDER BY l.lease_name
LIMIT $2::bigint
