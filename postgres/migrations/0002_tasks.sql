-- fence schema version 2 for PostgreSQL: task epochs for long-running agent
-- tasks (package task). A task's epoch is the fence of its lease "task:<id>".
CREATE TABLE {{prefix}}tasks (
    task_id       VARCHAR(191) COLLATE "C" PRIMARY KEY,
    epoch         BIGINT       NOT NULL DEFAULT 0,
    state         VARCHAR(16)  NOT NULL
                  CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    model         VARCHAR(191) NOT NULL DEFAULT '',
    plan          TEXT,
    summary       TEXT,
    error_text    TEXT,
    created_at_ms BIGINT       NOT NULL,
    updated_at_ms BIGINT       NOT NULL
);

CREATE TABLE {{prefix}}task_steps (
    task_id       VARCHAR(191) COLLATE "C" NOT NULL,
    epoch         BIGINT       NOT NULL,
    step_key      VARCHAR(191) COLLATE "C" NOT NULL,
    result        TEXT,
    created_at_ms BIGINT       NOT NULL,
    PRIMARY KEY (task_id, epoch, step_key)
);
