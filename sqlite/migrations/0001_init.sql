-- fence schema v1 for SQLite. {{prefix}} is replaced by the validated table
-- prefix (default fence_). Times are integer milliseconds of the database
-- clock. See docs/SCHEMA.md for the meaning of every column.
CREATE TABLE IF NOT EXISTS {{prefix}}leases (
    lease_name      TEXT    NOT NULL PRIMARY KEY,
    owner_token     TEXT    NOT NULL,
    fence_token     INTEGER NOT NULL,
    state           TEXT    NOT NULL,
    leased_until_ms INTEGER NOT NULL,
    acquired_at_ms  INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    renew_count     INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS {{prefix}}runs (
    run_id         INTEGER PRIMARY KEY AUTOINCREMENT, -- AUTOINCREMENT: ids are never reused, even after deletes
    lease_name     TEXT    NOT NULL,
    owner_token    TEXT    NOT NULL,
    fence_token    INTEGER NOT NULL,
    status         TEXT    NOT NULL,
    started_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER,
    result         TEXT,
    error_text     TEXT,
    exit_code      INTEGER
);

CREATE INDEX IF NOT EXISTS {{prefix}}runs_lease_status ON {{prefix}}runs (lease_name, status, fence_token);
CREATE INDEX IF NOT EXISTS {{prefix}}runs_status ON {{prefix}}runs (status);
