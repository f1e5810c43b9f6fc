-- $1 version just applied.
INSERT INTO {{prefix}}schema (version, applied_at_ms) VALUES ($1::int, {{now_ms}})
