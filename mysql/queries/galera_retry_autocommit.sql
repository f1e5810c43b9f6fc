-- How often a Galera node re-runs an autocommit statement that failed
-- certification, for this session. fence needs 0 (see CheckSession).
SELECT @@session.wsrep_retry_autocommit
