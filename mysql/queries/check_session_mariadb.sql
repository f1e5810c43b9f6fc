-- check_session.sql under MariaDB 10.x's names (tx_isolation, tx_read_only).
SELECT @@session.autocommit, @@session.tx_isolation, @@session.tx_read_only
