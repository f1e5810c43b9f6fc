-- Renew. $1 name, $2 owner, $3 fence, $4 ttl ms.
--
-- The clock is read inline rather than once for the statement: if the UPDATE
-- waits for a row lock (a fenced transaction holding FOR SHARE), PostgreSQL
-- re-evaluates the WHERE and SET on the latest row version after the wait, and
-- an inline clock_timestamp() is read again then. A renew therefore decides
-- validity at the instant it holds the row, and cannot revive a lease that
-- expired while it waited. The reads for leased_until and updated_at may
-- differ by microseconds; updated_at is reported as now.
--
-- The outer SELECT always returns one row, so a refusal still reports the
-- database now in the same round trip.
WITH renewed AS (
    UPDATE {{prefix}}leases
    SET leased_until_ms = {{now_ms}} + $4::bigint,
        updated_at_ms   = {{now_ms}},
        renew_count     = renew_count + 1
    WHERE lease_name = $1::text AND owner_token = $2::text AND fence_token = $3::bigint
      AND leased_until_ms > {{now_ms}}
    RETURNING leased_until_ms, updated_at_ms
)
SELECT renewed.leased_until_ms, coalesce(renewed.updated_at_ms, {{now_ms}})
FROM (VALUES (1)) AS one LEFT JOIN renewed ON true
