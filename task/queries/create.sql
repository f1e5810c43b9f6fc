INSERT INTO {{prefix}}tasks (task_id, epoch, state, model, plan, created_at_ms, updated_at_ms)
VALUES (?, 0, 'pending', ?, ?, {{now_ms}}, {{now_ms}})
