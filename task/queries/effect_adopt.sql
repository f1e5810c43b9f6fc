-- The reconcile hook says a claim in doubt did not take effect: this epoch
-- takes the claim over and acts. epoch = ? (the doubtful claimer's) makes it
-- a compare-and-set: a row that changed meanwhile matches nothing.
UPDATE {{prefix}}task_effects
SET epoch = ?, state = 'claimed', claimed_at_ms = {{now_ms}}, updated_at_ms = {{now_ms}}
WHERE task_id = ? AND step_key = ? AND epoch = ? AND state IN ('claimed', 'doubt') AND {{fence}}
