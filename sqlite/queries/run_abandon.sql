UPDATE {{prefix}}runs
SET status = 'abandoned', finished_at_ms = {{now}}, error_text = 'superseded by fence ' || ?2
WHERE lease_name = ?1 AND status = 'running' AND fence_token < ?2
