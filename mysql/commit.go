package mysql

import (
	"context"
	"database/sql"
)

// CommitTx commits tx within ctx (driver.TxCommitter): go-sql-driver's
// Tx.Commit sends COMMIT with no deadline, so on a server that stopped
// answering (a black hole, not a refused connection) it waited for TCP to
// give up, minutes past the caller's deadline. Sent as a statement, the
// COMMIT is under go-sql-driver's context watcher, which closes the
// connection when ctx ends. A context error is then returned whether or
// not the COMMIT had been sent (go-sql-driver returns ctx.Err() itself in
// both cases), so its outcome is unknown.
//
// database/sql still holds tx open; its ROLLBACK, with nothing left to
// roll back on the server, only gives the connection back. It runs on a
// goroutine of its own, since go-sql-driver's Rollback has no deadline
// either; on a failed COMMIT the caller's Rollback does that (the
// connection is closed when ctx ended or the network failed, so it returns
// at once).
func (d *Driver) CommitTx(ctx context.Context, tx *sql.Tx) error {
	return commit(ctx, tx)
}

// RollbackTx rolls tx back within ctx (driver.TxCommitter), as CommitTx
// commits it.
func (d *Driver) RollbackTx(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, "ROLLBACK"); err != nil {
		// The connection is closed when ctx ended or the network failed,
		// and the server then rolls back.
		_ = tx.Rollback()
		return err
	}
	go tx.Rollback()
	return nil
}

func commit(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	go tx.Rollback()
	return nil
}

// rollbackUnless rolls tx back unless *committed: after commit, tx is
// already being released.
func rollbackUnless(tx *sql.Tx, committed *bool) {
	if !*committed {
		_ = tx.Rollback()
	}
}
