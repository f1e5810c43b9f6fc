-- fence schema version 3 for PostgreSQL: who holds a lease, in words people
-- read. holder is the owner's self-chosen name (default host:pid), stored with
-- each acquisition and each run so that fence leases, the page and HeldError
-- can say who is in the way; the owner token stays the secret that proves it.
-- guard_seq is bumped by fenced writes on clusters whose read locks do not
-- reach other nodes (MariaDB Galera); PostgreSQL keeps it for one schema shape.
ALTER TABLE {{prefix}}leases ADD COLUMN IF NOT EXISTS holder VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE {{prefix}}leases ADD COLUMN IF NOT EXISTS guard_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE {{prefix}}runs ADD COLUMN IF NOT EXISTS holder VARCHAR(255) NOT NULL DEFAULT '';
