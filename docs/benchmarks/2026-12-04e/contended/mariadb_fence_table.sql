-- fence's lease table as Migrate creates it on MariaDB (schema versions 1 and 3: CREATE, then
-- ALTER TABLE ADD COLUMN), with 1,000 free names.
DROP TABLE IF EXISTS zz_leases;
CREATE TABLE zz_leases (
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
ALTER TABLE zz_leases
    ADD COLUMN holder    VARCHAR(255) NOT NULL DEFAULT '',
    ADD COLUMN guard_seq BIGINT       NOT NULL DEFAULT 0;
INSERT INTO zz_leases (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms) SELECT CONCAT('n-', seq), 'x', 1, 'released', 0, 0, 0 FROM seq_0_to_999;
