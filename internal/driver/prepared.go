package driver

import (
	"context"
	"database/sql"
)

// Execer is what a fenced write runs on (the root's Execer).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// PreparedExecer is an optional interface of a Driver that runs Store.Exec's
// statements (the caller's statement with the guard spliced in) prepared,
// cached by their text, on the driver's handle: where the parse is a large
// part of a statement's cost (SQLite, pure Go; MySQL/MariaDB, whose handle
// interpolates the parameters and the server parses the statement, guard
// included, on every call). The Execer it returns runs each statement in
// autocommit, as the handle would. Store.Exec does not use it where a
// fenced write needs a transaction of its own (driver.TxGuard: Galera).
type PreparedExecer interface {
	PreparedExecer() Execer
}
