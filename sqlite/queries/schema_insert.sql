INSERT INTO {{prefix}}schema (version, applied_at_ms) VALUES (?1, {{now}})
