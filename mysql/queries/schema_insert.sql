-- The duplicate case is someone else's migration tool having recorded the
-- version; the tables are IF NOT EXISTS, so that is not an error.
INSERT INTO {{prefix}}schema (version, applied_at_ms) VALUES (?, {{now}})
ON DUPLICATE KEY UPDATE version = version
