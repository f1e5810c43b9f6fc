UPDATE {{prefix}}leases
SET leased_until_ms = {{now}} + ?4, updated_at_ms = {{now}}, renew_count = renew_count + 1
WHERE lease_name = ?1 AND owner_token = ?2 AND fence_token = ?3 AND leased_until_ms > {{now}}
RETURNING leased_until_ms, updated_at_ms
