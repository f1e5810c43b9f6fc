-- The reconcile hook says a claim in doubt did take effect, with this
-- result: it is committed by this epoch, and nothing acts again.
UPDATE {{prefix}}task_effects
SET epoch = ?, state = 'committed', result = ?, updated_at_ms = {{now_ms}}
WHERE task_id = ? AND step_key = ? AND epoch = ? AND state IN ('claimed', 'doubt') AND {{fence}}
