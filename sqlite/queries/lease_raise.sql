-- Second step of a raise, in the same transaction: every fence below the
-- floor becomes the floor (a fence below it, plus one, is at most the floor)
-- and its holder is revoked, as lease_revoke.sql does.
UPDATE {{prefix}}leases
SET fence_token = ?1, owner_token = '', holder = '', state = 'revoked', leased_until_ms = 0, updated_at_ms = {{now}}
WHERE fence_token < ?1
