-- The fence guard on MariaDB Galera, the first statement of every fenced
-- transaction. Galera certifies only the rows a transaction writes: a share
-- lock on the lease row (guard.sql, lock_tx.sql) lives on one node and a
-- takeover committed through another node never waits for it. This UPDATE
-- changes the lease row, so the transaction's write set carries it: a
-- takeover ordered before this transaction's commit, wherever it ran, fails
-- its certification (error 1213 at COMMIT, nothing committed), and one that
-- reached this node first is seen here and matches no row. guard_seq must
-- really change: Galera replicates no row for an UPDATE that sets a column
-- to its own value. The verdict is taken when the row lock is granted
-- ({{exec_now}}), as in lock_tx.sql.
UPDATE {{prefix}}leases SET guard_seq = guard_seq + 1
WHERE lease_name = ? AND owner_token = ? AND fence_token = ? AND leased_until_ms > {{exec_now}}
