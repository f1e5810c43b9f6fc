-- SQLite has no row locks: a transaction opened with BEGIN IMMEDIATE already
-- holds the database write lock, which serialises it with any takeover.
SELECT EXISTS (
    SELECT 1 FROM {{prefix}}leases
    WHERE lease_name = ?1 AND owner_token = ?2 AND fence_token = ?3 AND leased_until_ms > {{now}}
)
