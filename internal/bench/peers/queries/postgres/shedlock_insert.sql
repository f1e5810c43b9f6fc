-- ShedLock (usingDbTime) inserts a name once per process; after that it
-- only updates. A name another process inserted first is not an error here:
-- the update that follows decides.
INSERT INTO {{table}} (name, lock_until, locked_at, locked_by)
VALUES ($1, timezone('utc', CURRENT_TIMESTAMP) + CAST($2 AS interval), timezone('utc', CURRENT_TIMESTAMP), $3)
ON CONFLICT (name) DO NOTHING
