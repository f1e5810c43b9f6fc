-- leased_until_ms = 0 rather than now: a backwards step of the database clock
-- must never make a released lease valid again.
UPDATE {{prefix}}leases
SET state = 'released', leased_until_ms = 0, updated_at_ms = {{now}}
WHERE lease_name = ?1 AND owner_token = ?2 AND fence_token = ?3 AND leased_until_ms > {{now}}
