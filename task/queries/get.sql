SELECT task_id, epoch, state, model, COALESCE(plan, ''), COALESCE(summary, ''), COALESCE(error_text, ''), created_at_ms, updated_at_ms
FROM {{prefix}}tasks WHERE task_id = ?
