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
// part of a statement's cost (SQLite, pure Go). The Execer it returns runs
// each statement in autocommit, as the handle would.
type PreparedExecer interface {
	PreparedExecer() Execer
}
