-- The revoke takes a fence of its own, so every token issued before it is
-- stale, and the next acquisition continues above it.
UPDATE {{prefix}}leases
SET fence_token = fence_token + 1, owner_token = '', state = 'revoked', leased_until_ms = 0, updated_at_ms = {{now}}
WHERE lease_name = ?1
RETURNING fence_token
