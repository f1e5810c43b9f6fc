-- Release in one plain UPDATE of the lease row. $1 name, $2 owner, $3
-- fence. leased_until 0 (not now) so that a backwards step of the database
-- clock cannot make the lease valid again. One row when released.
--
-- The verdict and its re-check after a lock wait are lease_renew.sql's: a
-- release that waited for a fenced transaction past the expiry fails with
-- the marker "fence: waited past expiry" and the driver runs
-- lease_release_locked.sql, which reports false. Its instant is
-- statement_timestamp(), as in lease_renew.sql.
--
-- {{notify}} wakes waiters of other processes when one is present (see
-- handoff.go): pg_notify is delivered when this statement commits. The
-- fragment calls pg_notify as a plain expression (its void made a number
-- with ::text), not as (SELECT 1 FROM pg_notify(...)): PostgreSQL sets up
-- a subquery's plan on every execution, even when CASE never reaches it,
-- and that cost every release 5 µs (fence bench, 2026-12-05).
UPDATE {{prefix}}leases AS l
SET state = 'released', leased_until_ms = 0, updated_at_ms = {{stmt_now_ms}}
WHERE l.lease_name = $1::text AND l.owner_token = $2::text AND l.fence_token = $3::bigint
  AND l.leased_until_ms > {{stmt_now_ms}}
RETURNING CASE
    WHEN {{now_ms}} = {{stmt_now_ms}} THEN 0
    WHEN {{prefix}}lease_until($1::text) > {{now_ms}} THEN 0
    ELSE ('fence: waited past expiry of ' || l.lease_name)::bigint
    END,
    {{notify}}
