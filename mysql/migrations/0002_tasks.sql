-- fence schema version 2 for MySQL 8.0 and MariaDB 10.6+: task epochs for
-- long-running agent tasks (package task). A task's epoch is the fence of its
-- lease "task:<id>". Ids and step keys are VARBINARY for byte-wise keys, as
-- lease names are (see 0001_init.sql).
CREATE TABLE IF NOT EXISTS {{prefix}}tasks (
    task_id       VARBINARY(191) NOT NULL,
    epoch         BIGINT         NOT NULL DEFAULT 0,
    state         VARCHAR(16)    NOT NULL,
    model         VARCHAR(191)   NOT NULL DEFAULT '',
    plan          MEDIUMTEXT     NULL,
    summary       MEDIUMTEXT     NULL,
    error_text    MEDIUMTEXT     NULL,
    created_at_ms BIGINT         NOT NULL,
    updated_at_ms BIGINT         NOT NULL,
    PRIMARY KEY (task_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {{prefix}}task_steps (
    task_id       VARBINARY(191) NOT NULL,
    epoch         BIGINT         NOT NULL,
    step_key      VARBINARY(191) NOT NULL,
    result        MEDIUMTEXT     NULL,
    created_at_ms BIGINT         NOT NULL,
    PRIMARY KEY (task_id, epoch, step_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
