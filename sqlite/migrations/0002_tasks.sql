-- fence schema v2 for SQLite: task epochs for long-running agent tasks
-- (package task). A task's epoch is the fence of its lease "task:<id>".
CREATE TABLE IF NOT EXISTS {{prefix}}tasks (
    task_id       TEXT    NOT NULL PRIMARY KEY,
    epoch         INTEGER NOT NULL DEFAULT 0,
    state         TEXT    NOT NULL,
    model         TEXT    NOT NULL DEFAULT '',
    plan          TEXT,
    summary       TEXT,
    error_text    TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS {{prefix}}task_steps (
    task_id       TEXT    NOT NULL,
    epoch         INTEGER NOT NULL,
    step_key      TEXT    NOT NULL,
    result        TEXT,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (task_id, epoch, step_key)
);
