-- fence schema version 3 for MySQL 8.0 and MariaDB 10.6+: who holds a lease,
-- in words people read. holder is the owner's self-chosen name (default
-- host:pid), stored with each acquisition and each run so that fence leases,
-- the page and HeldError can say who is in the way; the owner token stays the
-- secret that proves it.
--
-- guard_seq is the column a fenced write bumps on MariaDB Galera: Galera
-- certifies only the rows a transaction writes, so a share lock on the lease
-- row guards nothing on another node; a write to the row does.
--
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS (MariaDB has), and DDL commits
-- implicitly: one ALTER per table is atomic on both servers, and Migrate
-- treats "duplicate column" (1060) on a re-run after a crash as done.
ALTER TABLE {{prefix}}leases
    ADD COLUMN holder    VARCHAR(255) NOT NULL DEFAULT '',
    ADD COLUMN guard_seq BIGINT       NOT NULL DEFAULT 0;

ALTER TABLE {{prefix}}runs
    ADD COLUMN holder VARCHAR(255) NOT NULL DEFAULT '';
