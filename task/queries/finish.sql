UPDATE {{prefix}}tasks
SET state = ?, summary = ?, error_text = ?, updated_at_ms = {{now_ms}}
WHERE task_id = ? AND epoch = ? AND state = 'running' AND {{fence}}
