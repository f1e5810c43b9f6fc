-- A plain autocommit SELECT is a consistent read of the latest committed row
-- that takes no lock and waits for none (a SELECT inside a caller's
-- REPEATABLE READ transaction would see its snapshot, but fence runs this on
-- the pool, never in a transaction). LeaseAcquire asks it first for a lease
-- it last knew to be held, so that a refusal writes nothing and does not
-- queue behind the row's X lock or a fenced transaction's S lock.
SELECT lease_name, owner_token, holder, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, {{now}}
FROM {{prefix}}leases WHERE lease_name = ?
