-- fence's lease table with the columns of schema versions 1 and 3, and
-- ShedLock's documented PostgreSQL table: 1,000 names each, all free.
DROP TABLE IF EXISTS zz_leases, zz_shedlock;
CREATE TABLE zz_leases (
    lease_name      VARCHAR(191) COLLATE "C" PRIMARY KEY,
    owner_token     VARCHAR(64)  NOT NULL,
    fence_token     BIGINT       NOT NULL,
    state           VARCHAR(16)  NOT NULL CHECK (state IN ('held', 'released', 'revoked')),
    leased_until_ms BIGINT       NOT NULL,
    acquired_at_ms  BIGINT       NOT NULL,
    updated_at_ms   BIGINT       NOT NULL,
    renew_count     BIGINT       NOT NULL DEFAULT 0,
    holder VARCHAR(255) NOT NULL DEFAULT '',
    guard_seq BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE zz_shedlock(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name));
INSERT INTO zz_leases SELECT 'bench:'||g, 'x', 1, 'released', 0, 0, 0, 0, '', 0 FROM generate_series(1,1000) g;
INSERT INTO zz_shedlock SELECT 'bench:'||g, now()-interval '1 day', now(), 'x' FROM generate_series(1,1000) g;
