-- ShedLock has no database-time mode for SQLite; the database's clock is
-- used anyway (the same clock as the process's) so that the statements
-- keep the shape of the other databases'. Inserted once per name.
INSERT INTO {{table}} (name, lock_until, locked_at, locked_by)
VALUES (?1, CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?2, CAST(unixepoch('subsec') * 1000 AS INTEGER), ?3)
ON CONFLICT (name) DO NOTHING
