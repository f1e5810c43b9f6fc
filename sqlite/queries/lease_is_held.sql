-- The token's row and its expiry, by primary key: the caller compares the
-- expiry with the Go clock read after this read (SQLite's own clock, later),
-- so the read is a plain primary-key lookup without the clock function.
SELECT leased_until_ms FROM {{prefix}}leases
WHERE lease_name = ?1 AND owner_token = ?2 AND fence_token = ?3
