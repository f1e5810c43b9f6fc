CREATE TABLE IF NOT EXISTS {{prefix}}schema (
    version       INT PRIMARY KEY,
    applied_at_ms BIGINT NOT NULL
)
