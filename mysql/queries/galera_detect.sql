-- Is this server a Galera node? MariaDB without a cluster says OFF, MySQL
-- has no such variable and returns no row; both mean "not Galera". The
-- global value, not the session's: a session may turn replication off for
-- itself, the cluster still certifies everyone else's writes.
SHOW GLOBAL VARIABLES LIKE 'wsrep_on'
