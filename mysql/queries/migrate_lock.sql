-- Named locks are server-wide, so the name carries the database and the
-- prefix; MySQL refuses names over 64 characters, and a truncated name that
-- collides only serialises two migrations that could have run in parallel.
SELECT GET_LOCK(LEFT(CONCAT('fence_migrate:', COALESCE(DATABASE(), ''), ':', ?), 64), ?)
