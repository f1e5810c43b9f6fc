-- First step of a raise (docs/RUNBOOK.md): lock and read, inside the raise's
-- transaction, every lease whose fence is below the floor, so that what is
-- reported as "before" is what lease_raise.sql then changes. Rows at or
-- above the floor are left alone: their fences are already past it.
SELECT lease_name, owner_token, holder, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, {{now}}
FROM {{prefix}}leases
WHERE fence_token < ?
ORDER BY lease_name
FOR UPDATE
