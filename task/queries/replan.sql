UPDATE {{prefix}}tasks
SET epoch = ?, state = 'running', model = ?, plan = ?, updated_at_ms = {{now_ms}}
WHERE task_id = ? AND epoch < ? AND state IN ('pending', 'running', 'cancelled') AND {{fence}}
