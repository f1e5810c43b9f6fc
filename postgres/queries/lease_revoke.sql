-- Revoke. $1 name. Bumping the fence (not only clearing leased_until) makes
-- every outstanding token of the old generation stale at once. The new
-- fence is above the database clock in microseconds as well, as an
-- acquisition's is (docs/adr/0004-fence-floor.md). A revoked lease has no
-- holder: its name goes with the owner token (the run ledger keeps who held it).
-- {{notify}} wakes waiters, as a release does (see lease_release.sql); it
-- is a WHERE of the outer SELECT (always true) so that it is evaluated once
-- per revoked row while the result stays the one fence column.
WITH revoked AS (
    UPDATE {{prefix}}leases
    SET fence_token = GREATEST(fence_token + 1, {{floor_us}}), owner_token = '', holder = '', state = 'revoked',
        leased_until_ms = 0, updated_at_ms = {{now_ms}}
    WHERE lease_name = $1::text
    RETURNING lease_name, fence_token
)
SELECT l.fence_token FROM revoked AS l WHERE {{notify}} IS NOT NULL
