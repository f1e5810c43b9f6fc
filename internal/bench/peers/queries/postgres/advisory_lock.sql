-- A session-level advisory lock: no row, no WAL, gone with the session.
SELECT pg_try_advisory_lock($1)
