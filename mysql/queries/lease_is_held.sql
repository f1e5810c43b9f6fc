-- A consistent read never waits for a lock, so statement start is now.
SELECT COUNT(*) FROM {{prefix}}leases
WHERE lease_name = ? AND owner_token = ? AND fence_token = ? AND leased_until_ms > {{now}}
