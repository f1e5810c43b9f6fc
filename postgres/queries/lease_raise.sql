-- Raise every fence below a floor to the floor, revoking its holder, in one
-- statement: the operator's step after a restore or a replica promotion
-- (docs/RUNBOOK.md). $1 is the floor; 0 means the database clock in
-- microseconds, the floor every acquisition already respects.
--
-- old locks the rows it will change (FOR UPDATE re-reads a row that a
-- concurrent statement changed and re-checks it against the floor), so that
-- the row reported as "before" is the row the UPDATE changed. A fence below
-- the floor plus one is at most the floor, so the new fence is the floor
-- itself. Rows already at or above the floor are left alone: their fences
-- are newer than anything the floor stands for.
--
-- The result has one row per raised lease and always at least one row, so
-- that the floor used is reported when nothing was below it.
WITH f AS (
    SELECT COALESCE(NULLIF($1::bigint, 0), {{floor_us}}) AS floor_us, {{now_ms}} AS now_ms
),
old AS (
    SELECT l.lease_name, l.owner_token, l.holder, l.fence_token, l.state, l.leased_until_ms, l.acquired_at_ms, l.updated_at_ms
    FROM {{prefix}}leases AS l, f
    WHERE l.fence_token < f.floor_us
    FOR UPDATE OF l
),
raised AS (
    UPDATE {{prefix}}leases AS l
    SET fence_token = f.floor_us, owner_token = '', holder = '', state = 'revoked',
        leased_until_ms = 0, updated_at_ms = f.now_ms
    FROM old, f
    WHERE l.lease_name = old.lease_name
    RETURNING l.lease_name, l.fence_token
)
SELECT f.floor_us, f.now_ms, r.lease_name, r.owner_token, r.holder, r.fence_token, r.state,
       r.leased_until_ms, r.acquired_at_ms, r.updated_at_ms, r.new_fence
FROM f LEFT JOIN (
    SELECT old.*, raised.fence_token AS new_fence
    FROM old JOIN raised ON raised.lease_name = old.lease_name
) AS r ON true
ORDER BY r.lease_name COLLATE "C"
