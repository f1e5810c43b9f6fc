-- Revoke. $1 name. Bumping the fence (not only clearing leased_until) makes
-- every outstanding token of the old generation stale at once.
UPDATE {{prefix}}leases
SET fence_token = fence_token + 1, owner_token = '', state = 'revoked',
    leased_until_ms = 0, updated_at_ms = {{now_ms}}
WHERE lease_name = $1::text
RETURNING fence_token
