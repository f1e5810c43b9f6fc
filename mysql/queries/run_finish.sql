-- The article's fenced completion. In a multi-table UPDATE InnoDB reads the
-- joined lease row with a share lock under READ COMMITTED too (only
-- single-table UPDATE and INSERT ... SELECT fall back to a consistent read
-- there; measured on MariaDB 10.11). Both rows are primary-key lookups, read
-- before the join runs, and whichever is read second is read after the wait
-- for the first, with a lock: the lease row in share mode, so a takeover
-- waits for this statement, or this statement sees the takeover. In the race
-- test MariaDB read the run row first: the completion that waited for it
-- then saw the committed takeover and changed nothing.
UPDATE {{prefix}}runs AS r
JOIN {{prefix}}leases AS l ON l.lease_name = ?
SET r.status = ?, r.finished_at_ms = {{exec_now}},
    r.result = COALESCE(NULLIF(?, ''), r.result), r.error_text = NULLIF(?, ''), r.exit_code = ?
WHERE r.run_id = ? AND r.fence_token = ? AND r.lease_name = l.lease_name AND r.status = 'running'
  AND l.owner_token = ? AND l.fence_token = ? AND l.leased_until_ms > {{exec_now}}
