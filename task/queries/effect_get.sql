-- age_ms is by the database clock, as claimed_at_ms is.
SELECT payload_hash, epoch, state, result, claimed_at_ms, updated_at_ms, {{now_ms}} - claimed_at_ms
FROM {{prefix}}task_effects WHERE task_id = ? AND step_key = ?
