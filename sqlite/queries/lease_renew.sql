-- ?5 is the Go clock in ms, read just before: the new term starts there, and
-- being bound it need not come back with RETURNING (one step, no result
-- rows). It is SQLite's own clock read a little earlier, so the term it
-- gives ends no later than one counted from the statement. Whether the
-- token is still valid is the database clock's call.
UPDATE {{prefix}}leases
SET leased_until_ms = ?5 + ?4, updated_at_ms = ?5, renew_count = renew_count + 1
WHERE lease_name = ?1 AND owner_token = ?2 AND fence_token = ?3 AND leased_until_ms > {{now}}
