-- The article's fenced completion: the run's own fence and the lease's
-- current owner, fence and expiry are checked in the statement that writes.
UPDATE {{prefix}}runs
SET status = ?5, finished_at_ms = {{now}}, result = COALESCE(NULLIF(?6, ''), result), error_text = NULLIF(?7, ''), exit_code = ?8
WHERE run_id = ?1 AND fence_token = ?4 AND lease_name = ?2 AND status = 'running'
  AND EXISTS (
    SELECT 1 FROM {{prefix}}leases AS l
    WHERE l.lease_name = ?2 AND l.owner_token = ?3 AND l.fence_token = ?4 AND l.leased_until_ms > {{now}}
  )
