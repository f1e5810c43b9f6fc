-- Record the result of this epoch's claim. A superseded epoch's record is
-- refused by the fence and the claim stays, in doubt for the next epoch.
UPDATE {{prefix}}task_effects
SET state = 'committed', result = ?, updated_at_ms = {{now_ms}}
WHERE task_id = ? AND step_key = ? AND epoch = ? AND state = 'claimed' AND {{fence}}
