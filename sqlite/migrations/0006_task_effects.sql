-- fence schema version 6 for SQLite: the effect ledger of package task.
-- An effect is keyed by (task, step), never by the epoch: epoch N+1 retrying
-- a step that epoch N committed finds its row and gets the stored result
-- back instead of acting again. epoch is the epoch that holds the claim (or
-- committed the effect); the fence is checked in the statement that writes
-- the row, against the lease. payload_hash (hex SHA-256 of the step's
-- payload) tells a retry from a different effect under the same key.
-- state is 'claimed' (acting now, or in doubt once a newer epoch finds
-- it), 'doubt' (the claimer's effect failed and may have happened) or
-- 'committed'. (Version 5 is another change's; the numbers may skip.)
CREATE TABLE IF NOT EXISTS {{prefix}}task_effects (
    task_id       TEXT    NOT NULL,
    step_key      TEXT    NOT NULL,
    payload_hash  TEXT    NOT NULL,
    epoch         INTEGER NOT NULL,
    state         TEXT    NOT NULL,
    result        BLOB,
    claimed_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (task_id, step_key)
);
