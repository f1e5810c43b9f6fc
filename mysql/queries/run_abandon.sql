UPDATE {{prefix}}runs
SET status = 'abandoned', finished_at_ms = {{now}}, error_text = CONCAT('superseded by fence ', ?)
WHERE lease_name = ? AND status = 'running' AND fence_token < ?
