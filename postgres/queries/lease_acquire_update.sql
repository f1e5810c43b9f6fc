-- Acquire a lease this process knows to exist and not to be held, in one
-- plain UPDATE of its row. $1 name, $2 owner, $3 ttl ms, $4 holder name.
-- No row back: the lease is held, or the row is gone; the driver then runs
-- lease_acquire.sql, which answers every case.
--
-- The clock is statement_timestamp(), when the server received this
-- statement: one instant wherever it appears (clock_timestamp() would need
-- the materialised CTE of lease_acquire.sql, which costs server time: the
-- CTE and the holder arm cost 15-20% of 16 clients' acquire-release
-- throughput in pgbench). If the UPDATE waits for the row, that instant is
-- older than the wait, which only errs towards not taking the
-- lease and towards a shorter new lease, never towards overlap. Of two
-- racing acquirers the second re-evaluates the WHERE against the winner's
-- version (READ COMMITTED) and updates nothing. The new fence is
-- max(old + 1, floor_us) as in lease_acquire.sql.
UPDATE {{prefix}}leases AS l
SET owner_token     = $2::text,
    holder          = $4::text,
    fence_token     = GREATEST(l.fence_token + 1, {{stmt_floor_us}}),
    state           = 'held',
    leased_until_ms = {{stmt_now_ms}} + $3::bigint,
    acquired_at_ms  = {{stmt_now_ms}},
    updated_at_ms   = {{stmt_now_ms}},
    renew_count     = 0
WHERE l.lease_name = $1::text AND l.leased_until_ms <= {{stmt_now_ms}}
RETURNING l.fence_token, l.leased_until_ms, {{stmt_now_ms}}
