-- fence schema version 6 for MySQL 8.0 and MariaDB 10.6+: the effect ledger
-- of package task. An effect is keyed by (task, step), never by the epoch:
-- epoch N+1 retrying a step that epoch N committed finds its row and gets
-- the stored result back instead of acting again. epoch is the epoch that
-- holds the claim (or committed the effect); the fence is checked in the
-- statement that writes the row, against the lease. payload_hash (hex
-- SHA-256 of the step's payload) tells a retry from a different effect under
-- the same key. state is 'claimed' (acting now, or in doubt once a newer epoch
-- finds it), 'doubt' (the claimer's effect failed and may have happened) or
-- 'committed'. Keys are VARBINARY for byte-wise keys, as task ids
-- are (0002_tasks.sql); result is bytes, since a tool's output need not be
-- text. (Version 5 is another change's; the numbers may skip.)
CREATE TABLE IF NOT EXISTS {{prefix}}task_effects (
    task_id       VARBINARY(191) NOT NULL,
    step_key      VARBINARY(191) NOT NULL,
    payload_hash  CHAR(64)       NOT NULL,
    epoch         BIGINT         NOT NULL,
    state         VARCHAR(16)    NOT NULL,
    result        MEDIUMBLOB     NULL,
    claimed_at_ms BIGINT         NOT NULL,
    updated_at_ms BIGINT         NOT NULL,
    PRIMARY KEY (task_id, step_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
