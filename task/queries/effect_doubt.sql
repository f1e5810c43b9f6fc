-- The claimer's effect failed and may have happened: the next attempt goes
-- to the reconcile hook instead of waiting for an attempt that is over.
UPDATE {{prefix}}task_effects
SET state = 'doubt', updated_at_ms = {{now_ms}}
WHERE task_id = ? AND step_key = ? AND epoch = ? AND state = 'claimed' AND {{fence}}
