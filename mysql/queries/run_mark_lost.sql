UPDATE {{prefix}}runs
SET status = 'lost', finished_at_ms = {{now}}, error_text = ?
WHERE run_id = ? AND fence_token = ? AND status = 'running'
