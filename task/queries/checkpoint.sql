UPDATE {{prefix}}tasks
SET summary = ?, updated_at_ms = {{now_ms}}
WHERE task_id = ? AND epoch = ? AND state = 'running' AND {{fence}}
