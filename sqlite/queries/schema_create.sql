CREATE TABLE IF NOT EXISTS {{prefix}}schema (
    version       INTEGER NOT NULL PRIMARY KEY,
    applied_at_ms INTEGER NOT NULL
)
