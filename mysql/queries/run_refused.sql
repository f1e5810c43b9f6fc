-- The worker of an abandoned run reports, too late, that it has ended: the
-- run ends now rather than when its successor started, so the ledger shows
-- how long the stale run overlapped the newer generation. Once only: a
-- retried report does not move the end again. Run id, fence.
UPDATE {{prefix}}runs
SET finished_at_ms = {{now}}, error_text = CONCAT(error_text, '; completion refused')
WHERE run_id = ? AND fence_token = ? AND status = 'abandoned'
  AND error_text NOT LIKE '%; completion refused'
