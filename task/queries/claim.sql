-- The new executor's fence becomes the task's epoch. epoch < ? keeps epochs
-- monotonic even if two claims race; {{fence}} makes the claim itself fenced.
UPDATE {{prefix}}tasks
SET epoch = ?, state = 'running', updated_at_ms = {{now_ms}}
WHERE task_id = ? AND epoch < ? AND state IN ('pending', 'running', 'cancelled') AND {{fence}}
