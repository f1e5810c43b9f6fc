-- One row per lease: the highest fence whose write committed, its owner id,
-- and how many guarded writes committed (raise.sql bumps it so that every
-- accepted UPDATE changes the row).
CREATE TABLE IF NOT EXISTS {{table}} (
    lease       TEXT    NOT NULL PRIMARY KEY,
    fence_token INTEGER NOT NULL,
    owner_id    TEXT    NOT NULL,
    writes      INTEGER NOT NULL
)
