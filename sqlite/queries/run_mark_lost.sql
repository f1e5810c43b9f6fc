UPDATE {{prefix}}runs
SET status = 'lost', finished_at_ms = {{now}}, error_text = ?3
WHERE run_id = ?1 AND fence_token = ?2 AND status = 'running'
