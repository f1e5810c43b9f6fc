-- The session settings fence relies on (CheckSession), under MySQL 8.0's
-- names; MariaDB before 11.1 knows only check_session_mariadb.sql's.
SELECT @@session.autocommit, @@session.transaction_isolation, @@session.transaction_read_only
