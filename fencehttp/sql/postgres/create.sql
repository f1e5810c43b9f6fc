-- One row per lease: the highest fence whose write committed, its owner id,
-- and how many guarded writes committed.
CREATE TABLE IF NOT EXISTS {{table}} (
    lease       TEXT   NOT NULL PRIMARY KEY,
    fence_token BIGINT NOT NULL,
    owner_id    TEXT   NOT NULL,
    writes      BIGINT NOT NULL
)
