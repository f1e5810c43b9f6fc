-- Acquire a lease whose row exists, in one plain UPDATE of that row and one
-- round trip. $1 name, $2 owner, $3 ttl ms, $4 holder name. A name with no
-- row in this statement's snapshot gets lease_acquire_new.sql instead (once
-- per name, and after a row was deleted outside fence).
--
-- One instant (clock, materialised because clock_timestamp() is volatile) is
-- used for the expiry test, the new leased_until/acquired_at and the reported
-- now, so that leased_until - now is exactly the TTL. If the UPDATE has to
-- wait for the row that instant is a little old, which only errs towards not
-- taking the lease and towards a shorter new lease, never towards overlap.
--
-- Held (the common refusal): the UPDATE's own WHERE rejects the row as it
-- scans it, so a refused acquire locks nothing and writes nothing, and the
-- second arm reads the holder from the statement's snapshot.
--
-- Free by the snapshot: the UPDATE locks the row. Under READ COMMITTED, when
-- a concurrent transaction changed the row meanwhile (another acquisition,
-- a renew, a release), PostgreSQL re-evaluates the WHERE against the latest
-- version (with the same clock row: a CTE's row is carried into the
-- re-check, not recomputed), so of two racing acquirers the second one
-- updates nothing, without an error, and reports no holder (the winner is
-- not in its snapshot). When the holder of the lock only locked the row (a
-- fenced transaction of the old generation, FOR SHARE) nothing is
-- re-evaluated, and nothing needs to be: the row it judged expired at the
-- clock instant is the row it updates, and an expired lease stays expired.
--
-- A new fence is max(old + 1, floor_us), the database clock in microseconds
-- (docs/adr/0004-fence-floor.md): a lease table restored from an older dump
-- still hands out fences above every fence handed out before the restore.
WITH clock AS MATERIALIZED (
    SELECT {{now_ms}} AS now_ms, {{floor_us}} AS floor_us
),
won AS (
    UPDATE {{prefix}}leases AS l
    SET owner_token     = $2::text,
        holder          = $4::text,
        fence_token     = GREATEST(l.fence_token + 1, clock.floor_us),
        state           = 'held',
        leased_until_ms = clock.now_ms + $3::bigint,
        acquired_at_ms  = clock.now_ms,
        updated_at_ms   = clock.now_ms,
        renew_count     = 0
    FROM clock
    WHERE l.lease_name = $1::text AND l.leased_until_ms <= clock.now_ms
    RETURNING l.fence_token, l.leased_until_ms, clock.now_ms
)
-- Acquired: the new generation. Not acquired: the snapshot's row as the
-- holder (NULLs when there is no row: the caller then runs
-- lease_acquire_new.sql); the caller treats an expired row as "holder
-- unknown" (we lost a race to a generation our snapshot cannot see).
SELECT true, won.fence_token, won.leased_until_ms, won.now_ms,
       NULL::text, NULL::text, NULL::bigint, NULL::bigint, NULL::text
FROM won
UNION ALL
SELECT false, cur.fence_token, cur.leased_until_ms, clock.now_ms,
       cur.owner_token::text, cur.state::text, cur.acquired_at_ms, cur.updated_at_ms, cur.holder::text
FROM clock LEFT JOIN {{prefix}}leases AS cur ON cur.lease_name = $1::text
WHERE NOT EXISTS (SELECT 1 FROM won)
