-- fence schema version 6 for PostgreSQL: the effect ledger of package task.
-- An effect is keyed by (task, step), never by the epoch: epoch N+1 retrying
-- a step that epoch N committed finds its row and gets the stored result
-- back instead of acting again. epoch is the epoch that holds the claim (or
-- committed the effect); the fence is checked in the statement that writes
-- the row, against the lease. payload_hash (hex SHA-256 of the step's
-- payload) tells a retry from a different effect under the same key.
-- state is 'claimed' (acting now, or in doubt once a newer epoch finds
-- it), 'doubt' (the claimer's effect failed and may have happened) or
-- 'committed'. result is bytes: a tool's output need not be UTF-8.
-- (Version 5 is another change's; the numbers may skip.)
CREATE TABLE {{prefix}}task_effects (
    task_id       VARCHAR(191) COLLATE "C" NOT NULL,
    step_key      VARCHAR(191) COLLATE "C" NOT NULL,
    payload_hash  CHAR(64)     NOT NULL,
    epoch         BIGINT       NOT NULL,
    state         VARCHAR(16)  NOT NULL CHECK (state IN ('claimed', 'doubt', 'committed')),
    result        BYTEA,
    claimed_at_ms BIGINT       NOT NULL,
    updated_at_ms BIGINT       NOT NULL,
    PRIMARY KEY (task_id, step_key)
);
