-- The claimer's effect definitely did not happen: drop the claim so that a
-- retry acts again.
DELETE FROM {{prefix}}task_effects
WHERE task_id = ? AND step_key = ? AND epoch = ? AND state = 'claimed' AND {{fence}}
