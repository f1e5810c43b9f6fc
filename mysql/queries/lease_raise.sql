-- Second step of a raise, once per row lease_raise_lock.sql locked: the
-- fence becomes the floor (a fence below the floor, plus one, is at most the
-- floor) and the holder is revoked, as lease_revoke.sql does.
UPDATE {{prefix}}leases
SET fence_token = ?, owner_token = '', holder = '', state = 'revoked',
    leased_until_ms = 0, updated_at_ms = {{exec_now}}
WHERE lease_name = ? AND fence_token < ?
