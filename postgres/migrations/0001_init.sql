-- fence schema version 1 for PostgreSQL. {{prefix}} is the table prefix.
-- Every *_ms column is milliseconds since the Unix epoch read from the
-- database clock; see docs/SCHEMA.md for what each statement does with them.

CREATE TABLE {{prefix}}leases (
    -- COLLATE "C": names compare and sort byte-wise, as on the other databases.
    lease_name      VARCHAR(191) COLLATE "C" PRIMARY KEY,
    owner_token     VARCHAR(64)  NOT NULL,
    fence_token     BIGINT       NOT NULL,
    state           VARCHAR(16)  NOT NULL CHECK (state IN ('held', 'released', 'revoked')),
    leased_until_ms BIGINT       NOT NULL,
    acquired_at_ms  BIGINT       NOT NULL,
    updated_at_ms   BIGINT       NOT NULL,
    renew_count     BIGINT       NOT NULL DEFAULT 0
);

CREATE TABLE {{prefix}}runs (
    run_id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lease_name     VARCHAR(191) COLLATE "C" NOT NULL,
    owner_token    VARCHAR(64)  NOT NULL,
    fence_token    BIGINT       NOT NULL,
    status         VARCHAR(16)  NOT NULL
                   CHECK (status IN ('running', 'succeeded', 'failed', 'lost', 'abandoned')),
    started_at_ms  BIGINT       NOT NULL,
    finished_at_ms BIGINT,
    result         TEXT,
    error_text     TEXT,
    exit_code      BIGINT
);

-- Short suffixes: a 41-character prefix plus the suffix must stay within
-- PostgreSQL's 63-byte identifiers, or two prefixes could truncate to one name.
CREATE INDEX {{prefix}}runs_lsf ON {{prefix}}runs (lease_name, status, fence_token);
CREATE INDEX {{prefix}}runs_st ON {{prefix}}runs (status);
