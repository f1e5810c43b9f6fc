-- The worker of an abandoned run reports, too late, how it ended: the run
-- ends now rather than when its successor started, so the ledger shows how
-- long the stale run overlapped the newer generation. The report is added
-- to the run's error ("completion refused", or that its job was stopped
-- when the runner found the lease lost). Once only: an abandoned run's
-- error ('superseded by fence N') has no "; " until a report adds one, so a
-- retried report does not move the end again. ?1 run id, ?2 fence, ?3 report.
UPDATE {{prefix}}runs
SET finished_at_ms = {{now}}, error_text = error_text || '; ' || ?3
WHERE run_id = ?1 AND fence_token = ?2 AND status = 'abandoned'
  AND error_text NOT LIKE '%; %'
