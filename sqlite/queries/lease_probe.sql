-- An acquisition's first step: the row's holder, fence and expiry (what a
-- refusal reports, and no more), by primary key, so that a refusal is a plain read (no write
-- lock, no commit, not even the clock function: the caller compares the
-- expiry with the Go clock read after this read, which is SQLite's own clock
-- at a later instant, so "still valid then" implies "valid when read").
SELECT owner_token, holder, fence_token, leased_until_ms
FROM {{prefix}}leases WHERE lease_name = ?1
