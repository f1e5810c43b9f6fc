-- One statement: the task must be at this epoch, the epoch's lease valid
-- (the fence), and the step not yet recorded for this epoch (idempotency key
-- task, epoch, step). FROM tasks gives the SELECT a table on every dialect.
INSERT INTO {{prefix}}task_steps (task_id, epoch, step_key, result, created_at_ms)
SELECT t.task_id, t.epoch, ?, ?, {{now_ms}}
FROM {{prefix}}tasks t
WHERE t.task_id = ? AND t.epoch = ? AND t.state = 'running'
  AND NOT EXISTS (SELECT 1 FROM {{prefix}}task_steps s WHERE s.task_id = ? AND s.epoch = ? AND s.step_key = ?)
  AND {{fence}}
