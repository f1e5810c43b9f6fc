-- fence schema version 1 for MySQL 8.0 and MariaDB 10.6+.
--
-- Names and owners are VARBINARY, not VARCHAR ... COLLATE utf8mb4_bin: every
-- utf8mb4_bin collation is PAD SPACE on both servers, so 'job' and 'job '
-- would be one primary key (measured on MariaDB 10.11: duplicate-key error).
-- The NO PAD binary collations differ by server (utf8mb4_0900_bin on MySQL,
-- utf8mb4_nopad_bin on MariaDB); VARBINARY compares bytes on both. 191 bytes
-- is fence's limit on a lease name.
--
-- DDL commits implicitly in MySQL, so a migration cannot be rolled back:
-- every statement is IF NOT EXISTS and a re-run after a crash completes it.
-- Indexes are declared inside CREATE TABLE because MySQL 8 has no
-- CREATE INDEX IF NOT EXISTS.

CREATE TABLE IF NOT EXISTS {{prefix}}leases (
    lease_name      VARBINARY(191) NOT NULL,
    owner_token     VARBINARY(64)  NOT NULL,
    fence_token     BIGINT         NOT NULL,
    state           VARCHAR(16)    NOT NULL,
    leased_until_ms BIGINT         NOT NULL,
    acquired_at_ms  BIGINT         NOT NULL,
    updated_at_ms   BIGINT         NOT NULL,
    renew_count     BIGINT         NOT NULL DEFAULT 0,
    PRIMARY KEY (lease_name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- result and error_text are MEDIUMTEXT: MySQL's TEXT stops at 64 KiB, and
-- strict mode would refuse a longer result outright.
CREATE TABLE IF NOT EXISTS {{prefix}}runs (
    run_id         BIGINT         NOT NULL AUTO_INCREMENT,
    lease_name     VARBINARY(191) NOT NULL,
    owner_token    VARBINARY(64)  NOT NULL,
    fence_token    BIGINT         NOT NULL,
    status         VARCHAR(16)    NOT NULL,
    started_at_ms  BIGINT         NOT NULL,
    finished_at_ms BIGINT         NULL,
    result         MEDIUMTEXT     NULL,
    error_text     MEDIUMTEXT     NULL,
    exit_code      BIGINT         NULL,
    PRIMARY KEY (run_id),
    KEY runs_lease_status_fence (lease_name, status, fence_token),
    KEY runs_status (status)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
