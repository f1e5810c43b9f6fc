-- The worker of an abandoned run reports, too late, that it has ended: the
-- run ends now rather than when its successor started, so the ledger shows
-- how long the stale run overlapped the newer generation. Once only: a
-- retried report does not move the end again. ?1 run id, ?2 fence.
UPDATE {{prefix}}runs
SET finished_at_ms = {{now}}, error_text = error_text || '; completion refused'
WHERE run_id = ?1 AND fence_token = ?2 AND status = 'abandoned'
  AND error_text NOT LIKE '%; completion refused'
