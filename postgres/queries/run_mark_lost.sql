-- Mark a run lost. $1 run id, $2 fence, $3 reason. Unguarded on purpose: a
-- worker that lost its lease may always say so about its own run.
UPDATE {{prefix}}runs
SET status = 'lost', finished_at_ms = {{now_ms}}, error_text = $3::text
WHERE run_id = $1::bigint AND fence_token = $2::bigint AND status = 'running'
