-- Does this server have wsrep_retry_autocommit (MariaDB built with wsrep,
-- Galera on or off)? One row if so; MySQL has no such variable and returns
-- none. NewConnector asks once, on its first connection (connector.go).
SHOW SESSION VARIABLES LIKE 'wsrep_retry_autocommit'
