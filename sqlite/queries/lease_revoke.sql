-- The revoke takes a fence of its own, so every token issued before it is
-- stale, and the next acquisition continues above it. Like an acquisition's,
-- it is at least the database clock in microseconds
-- (docs/adr/0004-fence-floor.md). A revoked lease has no holder: its name
-- goes with the owner token (the run ledger keeps who held it).
UPDATE {{prefix}}leases
SET fence_token = max(fence_token + 1, {{floor_us:2}}), owner_token = '', holder = '', state = 'revoked', leased_until_ms = 0, updated_at_ms = {{now}}
WHERE lease_name = ?1
RETURNING fence_token
