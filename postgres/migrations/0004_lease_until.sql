-- fence schema version 4 for PostgreSQL: {{prefix}}lease_until(name), the
-- leased_until_ms of a lease row as the calling statement sees it (NULL when
-- there is no row).
--
-- Renew and release re-read the row's expiry when a lock wait moved the
-- clock past the instant of their verdict (queries/lease_renew.sql). As a
-- subquery that read cost every renew and release 3-10 µs even when it never
-- ran: PostgreSQL sets up a subquery's plan on every execution of the
-- statement (docs/benchmarks/2026-12-05/release). A function call inside
-- CASE is made only when CASE reaches it. STABLE, so that it reads with the
-- calling statement's snapshot as the subquery did (a VOLATILE function
-- would take a snapshot of its own), and not inlined, because its body reads
-- a table. The body is resolved with the caller's search_path when called,
-- as fence's own statements are.
-- down: DROP FUNCTION IF EXISTS {{prefix}}lease_until(text)
CREATE OR REPLACE FUNCTION {{prefix}}lease_until(text) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$ SELECT leased_until_ms FROM {{prefix}}leases WHERE lease_name = $1 $$;
