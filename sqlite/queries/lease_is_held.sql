SELECT EXISTS (
    SELECT 1 FROM {{prefix}}leases
    WHERE lease_name = ?1 AND owner_token = ?2 AND fence_token = ?3 AND leased_until_ms > {{now}}
)
