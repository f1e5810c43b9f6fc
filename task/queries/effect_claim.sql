-- Claim a step for this epoch before its effect runs. One statement: the
-- task must be running at this epoch, the epoch's lease valid (the fence),
-- and the step must have no row yet. The key is (task, step): a step any
-- epoch claimed or committed is not claimed again here. FROM tasks gives
-- the SELECT a table on every dialect.
INSERT INTO {{prefix}}task_effects (task_id, step_key, payload_hash, epoch, state, claimed_at_ms, updated_at_ms)
SELECT t.task_id, ?, ?, t.epoch, 'claimed', {{now_ms}}, {{now_ms}}
FROM {{prefix}}tasks t
WHERE t.task_id = ? AND t.epoch = ? AND t.state = 'running'
  AND NOT EXISTS (SELECT 1 FROM {{prefix}}task_effects x WHERE x.task_id = ? AND x.step_key = ?)
  AND {{fence}}
