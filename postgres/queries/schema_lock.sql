-- Serialises Migrate between processes until the migration transaction ends.
-- $1 is a key text naming the prefix, so different prefixes do not wait for
-- each other.
SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))
