-- The article's fenced completion. In a multi-table UPDATE InnoDB reads the
-- joined lease row with a share lock under READ COMMITTED too (only
-- single-table UPDATE and INSERT ... SELECT fall back to a consistent read
-- there); the lease row is a const table, locked and checked before the run
-- row is touched, so a takeover waits for this statement or this statement
-- sees the takeover. Verified by the race tests.
UPDATE {{prefix}}runs AS r
JOIN {{prefix}}leases AS l ON l.lease_name = ?
SET r.status = ?, r.finished_at_ms = {{exec_now}},
    r.result = COALESCE(NULLIF(?, ''), r.result), r.error_text = NULLIF(?, ''), r.exit_code = ?
WHERE r.run_id = ? AND r.fence_token = ? AND r.lease_name = l.lease_name AND r.status = 'running'
  AND l.owner_token = ? AND l.fence_token = ? AND l.leased_until_ms > {{exec_now}}
