-- fence schema v3 for SQLite: who holds a lease, in words people read.
-- holder is the owner's self-chosen name (default host:pid), stored with each
-- acquisition and each run so that fence leases, the page and HeldError can
-- say who is in the way; the owner token stays the secret that proves it.
-- guard_seq is bumped by fenced writes on databases whose read locks do not
-- reach other nodes (MariaDB Galera); it means nothing on SQLite.
ALTER TABLE {{prefix}}leases ADD COLUMN holder TEXT NOT NULL DEFAULT '';
ALTER TABLE {{prefix}}leases ADD COLUMN guard_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{prefix}}runs ADD COLUMN holder TEXT NOT NULL DEFAULT '';
