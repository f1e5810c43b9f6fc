-- The first connection of a NewConnector handle was made before the probe
-- answered; it gets the setting every later connection gets from the
-- driver's connection parameters (connector.go).
SET SESSION wsrep_retry_autocommit = 0
