-- The settings fence relies on, as this session sees them (CheckSession):
-- a primary, read-write by default and now, READ COMMITTED by default, and
-- commits durable before they are reported, statements read as UTF-8;
-- and the server's version (fencedSQLPolicy).
SELECT pg_is_in_recovery(),
       current_setting('default_transaction_isolation'),
       current_setting('default_transaction_read_only'),
       current_setting('transaction_read_only'),
       current_setting('synchronous_commit'),
       current_setting('client_encoding'),
       current_setting('server_version_num')::int
