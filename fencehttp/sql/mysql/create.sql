-- One row per lease: the highest fence whose write committed, its owner id,
-- and how many guarded writes committed (raise.sql bumps it so that every
-- accepted UPDATE changes the row, and the affected-row count is the same
-- with and without clientFoundRows). VARBINARY: a NO PAD byte comparison,
-- as for fence's own lease names; 191 bytes is fence.MaxNameLen.
CREATE TABLE IF NOT EXISTS {{table}} (
    lease       VARBINARY(191) NOT NULL,
    fence_token BIGINT         NOT NULL,
    owner_id    VARBINARY(32)  NOT NULL,
    writes      BIGINT         NOT NULL,
    PRIMARY KEY (lease)
) ENGINE = InnoDB
