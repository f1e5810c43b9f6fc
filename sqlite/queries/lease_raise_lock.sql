-- First step of a raise (docs/RUNBOOK.md), inside its write transaction:
-- every lease whose fence is below the floor, as it is before the raise.
-- Rows at or above the floor are left alone: their fences are already past it.
SELECT lease_name, owner_token, holder, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, {{now}}
FROM {{prefix}}leases
WHERE fence_token < ?1
ORDER BY lease_name
