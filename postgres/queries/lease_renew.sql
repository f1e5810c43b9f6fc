-- Renew in one plain UPDATE of the lease row. $1 name, $2 owner, $3 fence,
-- $4 ttl ms. One row when renewed (the new leased_until and the instant it
-- was judged at), none when the token does not hold a valid lease.
--
-- The UPDATE judges validity at the clock instant it scans the row, and
-- takes the row lock only then. Two kinds of wait can follow:
--
-- - A concurrent transaction changed the row (a takeover, a revoke, a
--   release, another renew of the same token): PostgreSQL re-evaluates the
--   WHERE against the latest version under READ COMMITTED, so a renew
--   racing a takeover matches nothing.
-- - The holder of the lock only locked it (a fenced transaction holds the
--   row FOR SHARE): nothing is re-evaluated, and the update goes ahead with
--   the verdict from before the wait. If the lease expired during that wait
--   the renew would revive it. RETURNING runs after the wait: when the
--   clock has moved past the instant of the verdict it re-reads the
--   leased_until the verdict was about (the snapshot's row, the row a
--   lock-only wait updates; {{prefix}}lease_until, schema version 4, a
--   function so that the read costs nothing when CASE does not reach it)
--   and, if that has passed by now, fails the whole
--   statement with 22P02 and the marker "fence: waited past expiry", which
--   rolls the renew back; the driver then runs lease_renew_locked.sql, which
--   locks the row before it reads the clock. The same re-check can fail
--   after a re-evaluated wait (the snapshot's row is older than the one
--   updated): the fallback then decides again, only slower.
--
-- In the same millisecond as the verdict no wait past the expiry is
-- possible (leased_until > now at millisecond resolution), so the common
-- case reads the clock once more and nothing else.
--
-- The verdict's instant is statement_timestamp(), when the server received
-- the statement: one instant wherever it appears, without the materialised
-- CTE that clock_timestamp() needs, which cost 8% of a renew (pgbench, one
-- client: 0.33 ms against 0.30 ms). (now() would be the transaction's
-- start, stale inside a longer transaction; statement_timestamp() is not.)
UPDATE {{prefix}}leases AS l
SET leased_until_ms = {{stmt_now_ms}} + $4::bigint,
    updated_at_ms   = {{stmt_now_ms}},
    renew_count     = l.renew_count + 1
WHERE l.lease_name = $1::text AND l.owner_token = $2::text AND l.fence_token = $3::bigint
  AND l.leased_until_ms > {{stmt_now_ms}}
RETURNING CASE
    WHEN {{now_ms}} = {{stmt_now_ms}} THEN l.leased_until_ms
    WHEN {{prefix}}lease_until($1::text) > {{now_ms}}
        THEN l.leased_until_ms
    ELSE ('fence: waited past expiry of ' || l.lease_name)::bigint
    END,
    {{stmt_now_ms}}
