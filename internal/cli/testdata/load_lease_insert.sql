-- The load test's bulk insert of leases into a migrated SQLite store, one
-- row per execution inside one transaction: far faster than acquiring each.
-- {{prefix}} is the table prefix; ?1 name, ?2 owner, ?3 fence, ?4 state,
-- ?5 leased_until_ms, ?6 acquired_at_ms and updated_at_ms.
INSERT INTO {{prefix}}leases (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
