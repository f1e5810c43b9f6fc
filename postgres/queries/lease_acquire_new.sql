-- Acquire a lease whose row lease_acquire.sql did not find in its snapshot:
-- a name never acquired before (or whose row was deleted outside fence), or
-- one a concurrent acquirer inserted after that snapshot. $1 name, $2 owner,
-- $3 ttl ms, $4 holder name. It decides every case on its own (absent, held,
-- expired), so a race with another acquirer of a new name ends as a refusal,
-- not an error.
--
-- One instant (clock, materialised because clock_timestamp() is volatile) is
-- used for the expiry test, the new leased_until/acquired_at and the reported
-- now, so that leased_until - now is exactly the TTL. If the upsert has to wait
-- for a row lock that instant is a little old, which only errs towards not
-- taking the lease and towards a shorter new lease, never towards overlap.
--
-- cur reads the row in the statement's snapshot. When it shows a valid holder
-- the INSERT … SELECT produces no row and never reaches ON CONFLICT: an upsert
-- whose DO UPDATE … WHERE is false still locks the row and writes WAL, and a
-- held lease is the common case for a failed acquire.
--
-- When cur shows no row or an expired one, the upsert decides. Under READ
-- COMMITTED ON CONFLICT locks the latest committed version of the row, even
-- one the snapshot cannot see, and evaluates DO UPDATE's WHERE against it; so
-- of two racing acquirers the second one waits, sees the winner's valid lease
-- and updates nothing, without an error.
--
-- A new fence is max(old + 1, floor_us), the database clock in microseconds
-- (docs/adr/0004-fence-floor.md): a lease table restored from an older dump
-- still hands out fences above every fence handed out before the restore.
-- The insert gets the floor alone, so a row deleted outside fence cannot
-- restart the lease at a fence handed out before either.
WITH clock AS (
    SELECT {{now_ms}} AS now_ms, {{floor_us}} AS floor_us
),
cur AS (
    SELECT l.owner_token, l.holder, l.fence_token, l.state, l.leased_until_ms, l.acquired_at_ms, l.updated_at_ms
    FROM {{prefix}}leases AS l
    WHERE l.lease_name = $1::text
),
won AS (
    INSERT INTO {{prefix}}leases AS l
        (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, renew_count, holder)
    SELECT $1::text, $2::text, clock.floor_us, 'held', clock.now_ms + $3::bigint, clock.now_ms, clock.now_ms, 0, $4::text
    FROM clock
    WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.leased_until_ms > clock.now_ms)
    ON CONFLICT (lease_name) DO UPDATE SET
        owner_token     = EXCLUDED.owner_token,
        holder          = EXCLUDED.holder,
        fence_token     = GREATEST(l.fence_token + 1, EXCLUDED.fence_token),
        state           = 'held',
        leased_until_ms = EXCLUDED.leased_until_ms,
        acquired_at_ms  = EXCLUDED.acquired_at_ms,
        updated_at_ms   = EXCLUDED.updated_at_ms,
        renew_count     = 0
    WHERE l.leased_until_ms <= EXCLUDED.acquired_at_ms
    RETURNING l.fence_token, l.leased_until_ms
)
-- Acquired: the new generation. Not acquired: cur's row as the holder; the
-- caller treats a missing or expired cur row as "holder unknown" (we lost a
-- race to a generation our snapshot cannot see).
SELECT true, won.fence_token, won.leased_until_ms, clock.now_ms,
       NULL::text, NULL::text, NULL::bigint, NULL::bigint, NULL::text
FROM won CROSS JOIN clock
UNION ALL
SELECT false, cur.fence_token, cur.leased_until_ms, clock.now_ms,
       cur.owner_token::text, cur.state::text, cur.acquired_at_ms, cur.updated_at_ms, cur.holder::text
FROM clock LEFT JOIN cur ON true
WHERE NOT EXISTS (SELECT 1 FROM won)
