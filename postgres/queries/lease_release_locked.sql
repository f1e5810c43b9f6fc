-- Release, locking the row before the clock is read: the fallback of
-- lease_release.sql when that statement waited for the row and cannot tell
-- whether the lease was still valid after the wait. $1 name, $2 owner, $3
-- fence. leased_until 0 (not now) so that a backwards step of the database
-- clock cannot make the lease valid again. The reason for locking first is
-- lease_renew_locked.sql's: a release that waited past the expiry reports
-- false.
-- {{notify}} wakes waiters of other processes when one is present (see
-- handoff.go): pg_notify is delivered when this statement commits.
WITH target AS MATERIALIZED (
    SELECT 1
    FROM {{prefix}}leases
    WHERE lease_name = $1::text AND owner_token = $2::text AND fence_token = $3::bigint
    FOR NO KEY UPDATE
),
clock AS MATERIALIZED (
    SELECT {{now_ms}} AS now_ms FROM (SELECT count(*) FROM target) AS locked
)
UPDATE {{prefix}}leases AS l
SET state = 'released', leased_until_ms = 0, updated_at_ms = clock.now_ms
FROM clock
WHERE l.lease_name = $1::text AND l.owner_token = $2::text AND l.fence_token = $3::bigint
  AND l.leased_until_ms > clock.now_ms
RETURNING {{notify}}
