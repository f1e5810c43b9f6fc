-- Every lease row, judged against one instant so the list is one consistent
-- picture; the LEFT JOIN returns that instant even when there are no rows.
WITH clock AS (
    SELECT {{now_ms}} AS now_ms
)
SELECT clock.now_ms, l.lease_name, l.owner_token, l.holder, l.fence_token, l.state,
       l.leased_until_ms, l.acquired_at_ms, l.updated_at_ms
FROM clock LEFT JOIN {{prefix}}leases AS l ON true
ORDER BY l.lease_name
