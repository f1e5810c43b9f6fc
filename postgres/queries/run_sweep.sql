-- Mark lost every running run whose lease generation is no longer valid.
--
-- Lock, then judge: gen share-locks the lease row of each running run's
-- generation, clock reads the time only after all of them are locked, and only
-- then is validity tested. A renew in flight is waited for and its result
-- seen, instead of its run being swept as expired on an older row version.
-- (The test cannot go inside gen: PostgreSQL would apply it before the lock,
-- to the row version in the statement's snapshot.) Rows are locked in name
-- order, as the batch renew locks them, so the two cannot deadlock.
WITH gen AS MATERIALIZED (
    SELECT r.run_id, l.leased_until_ms
    FROM {{prefix}}runs AS r
    JOIN {{prefix}}leases AS l
      ON l.lease_name = r.lease_name AND l.owner_token = r.owner_token AND l.fence_token = r.fence_token
    WHERE r.status = 'running'
    ORDER BY l.lease_name
    FOR SHARE OF l
),
clock AS MATERIALIZED (
    SELECT {{now_ms}} AS now_ms FROM (SELECT count(*) FROM gen) AS locked
)
UPDATE {{prefix}}runs AS r
SET status = 'lost', finished_at_ms = clock.now_ms,
    error_text = 'lease generation no longer valid (swept)'
FROM clock
WHERE r.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM gen WHERE gen.run_id = r.run_id AND gen.leased_until_ms > clock.now_ms)
