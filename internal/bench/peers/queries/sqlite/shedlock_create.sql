-- ShedLock's table on SQLite, times as milliseconds since the epoch.
CREATE TABLE {{table}} (
	name TEXT NOT NULL PRIMARY KEY,
	lock_until INTEGER NOT NULL,
	locked_at INTEGER NOT NULL,
	locked_by TEXT NOT NULL
)
