package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/fencekit/fence/internal/driver"
)

// MariaDB Galera Cluster (docs/adr/0006-galera.md). Galera certifies only
// the rows a transaction writes; the share locks that fence's guards take
// (guard.sql, lock_tx.sql, run_finish.sql) stay on the node that took them,
// so a takeover committed through another node neither waits for a stale
// owner's write nor makes it fail, and the write commits after the
// takeover. On a Galera node every fenced write therefore runs in a
// transaction whose first statement writes the lease row under the token's
// condition (galera_guard.sql). The lease operations write the row already.
//
// A single server keeps the share-lock guards and their SQL unchanged.

const (
	galeraUnknown = iota
	galeraYes
	galeraNo
)

var _ driver.TxGuard = (*Driver)(nil)

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// detectGalera asks the server whether it is a Galera node and remembers
// the answer. CheckSession calls it when a store opens; a driver used on its
// own asks at its first fenced write.
func (d *Driver) detectGalera(ctx context.Context, q queryRower) (bool, error) {
	var name, value string
	err := q.QueryRowContext(ctx, d.q["galera_detect"]).Scan(&name, &value)
	if errors.Is(err, sql.ErrNoRows) { // MySQL: no such variable
		err, value = nil, "OFF"
	}
	if err != nil {
		return false, err
	}
	on := strings.EqualFold(value, "ON") || value == "1"
	if on {
		d.galera.Store(galeraYes)
	} else {
		d.galera.Store(galeraNo)
	}
	return on, nil
}

// FencedWritesNeedTx reports whether the server is a Galera node, on which
// a fenced write must run in a transaction that starts with LockTx.
func (d *Driver) FencedWritesNeedTx(ctx context.Context) (bool, error) {
	switch d.galera.Load() {
	case galeraYes:
		return true, nil
	case galeraNo:
		return false, nil
	}
	return d.detectGalera(ctx, d.db)
}

// galeraGuard writes the lease row inside tx if t is valid, and reports
// whether it was (galera_guard.sql). The UPDATE always changes the row, so
// affected rows are matched rows with and without clientFoundRows.
func (d *Driver) galeraGuard(ctx context.Context, tx *sql.Tx, t driver.TokenParams) (bool, error) {
	res, err := tx.ExecContext(ctx, d.q["galera_guard"], t.Name, t.Owner, t.Fence)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
