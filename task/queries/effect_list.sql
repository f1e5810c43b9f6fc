SELECT step_key, payload_hash, epoch, state, result, claimed_at_ms, updated_at_ms, {{now_ms}} - claimed_at_ms
FROM {{prefix}}task_effects WHERE task_id = ? ORDER BY claimed_at_ms, step_key
