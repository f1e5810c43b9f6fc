SELECT task_id, epoch, step_key, COALESCE(result, ''), created_at_ms
FROM {{prefix}}task_steps WHERE task_id = ? ORDER BY created_at_ms, epoch, step_key
