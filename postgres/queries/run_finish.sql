-- Fenced completion. $1 name, $2 owner, $3 fence, $4 run id, $5 status,
-- $6 result (NULL keeps the start detail), $7 error text, $8 exit code.
--
-- The guard reads the lease row FOR SHARE. A plain EXISTS (or UPDATE … FROM
-- leases) fails open under READ COMMITTED: if this UPDATE waits for the run
-- row while a takeover commits, the re-check after the wait re-reads only the
-- run row and the stale completion lands after the takeover. With FOR SHARE
-- the takeover waits for this statement instead, or, if it committed first,
-- the locked re-read sees the new generation and nothing is updated.
UPDATE {{prefix}}runs AS r
SET status = $5::text, finished_at_ms = {{now_ms}},
    result = coalesce($6::text, r.result), error_text = $7::text, exit_code = $8::bigint
WHERE r.run_id = $4::bigint AND r.lease_name = $1::text AND r.owner_token = $2::text
  AND r.fence_token = $3::bigint AND r.status = 'running'
  AND {{guard}}
