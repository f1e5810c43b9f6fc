-- Not fenced by a lease: the revoke before it has already made every
-- executor's token stale; epoch < ? keeps a late cancel from undoing a newer epoch.
UPDATE {{prefix}}tasks
SET epoch = ?, state = 'cancelled', updated_at_ms = {{now_ms}}
WHERE task_id = ? AND epoch < ? AND state IN ('pending', 'running')
