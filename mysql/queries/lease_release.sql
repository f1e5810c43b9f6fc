-- leased_until_ms = 0 rather than now: a backwards step of the database clock
-- must never make a released lease valid again. The check uses {{exec_now}}
-- for the reason given in lease_renew.sql.
UPDATE {{prefix}}leases
SET state = 'released', leased_until_ms = 0, updated_at_ms = {{exec_now}}
WHERE lease_name = ? AND owner_token = ? AND fence_token = ? AND leased_until_ms > {{exec_now}}
