package postgres

import (
	"context"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

var _ driver.Handle = (*Driver)(nil)

// OpenDriver opens dsn with Open (fence's session settings forced) and
// returns a driver that owns the handle: fence.New bounds its pool and the
// store's Close closes it. It does not connect; fence.New does. prefix ""
// means "fence_".
func OpenDriver(dsn, prefix string) (*Driver, error) {
	db, err := Open(dsn)
	if err != nil {
		return nil, err
	}
	d, err := New(db, prefix)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.owned = true
	return d, nil
}

// Prefix returns the table prefix of the driver's statements.
func (d *Driver) Prefix() string { return d.prefix }

// WithPrefix returns a driver over the same handle or pool with another
// table prefix. The two share the handle, and whether Close closes it.
func (d *Driver) WithPrefix(prefix string) (driver.Handle, error) {
	n, err := build(d.c, orDefault(prefix))
	if err != nil {
		return nil, err
	}
	n.db, n.pool, n.owned = d.db, d.pool, d.owned
	return n, nil
}

// LimitPool bounds the pool of a handle OpenDriver opened; a caller's
// handle or pgx pool is the caller's to size.
func (d *Driver) LimitPool(maxOpen int, maxLifetime, maxIdleTime time.Duration) {
	driver.LimitOwned(d.db, d.owned, maxOpen, maxLifetime, maxIdleTime)
}

// Close closes the handle if OpenDriver opened it, and nothing otherwise.
// A store made over d (fence.New) uses that handle: close the store,
// not d, while the store is in use.
func (d *Driver) Close() error {
	return driver.CloseOwned(d.db, d.owned)
}

func orDefault(prefix string) string {
	if prefix == "" {
		return driver.DefaultPrefix
	}
	return prefix
}

// Exec runs one statement on the driver's handle or pool and returns the
// rows affected: Store.Exec's path for a driver made by NewPool.
func (d *Driver) Exec(ctx context.Context, query string, args []any) (int64, error) {
	return d.c.exec(ctx, query, args...)
}

// LockSQL is the statement LockTxTop runs and its arguments: it share-locks
// the lease row and selects whether the token is valid by the database
// clock, and fails in a subtransaction (Store.CheckWith, on the caller's
// transaction).
func (d *Driver) LockSQL(t driver.TokenParams) (string, []any) {
	return d.q.lockTxTop, []any{t.Name, t.Owner, t.Fence}
}

// LockSQLFresh is LockSQL for a transaction begun in the same round trip
// (fencepgx.InTx's batch of BEGIN and the check), which cannot be inside a
// savepoint: the plain lock_tx.sql, without the savepoint test's cost.
func (d *Driver) LockSQLFresh(t driver.TokenParams) (string, []any) {
	return d.q.lockTx, []any{t.Name, t.Owner, t.Fence}
}
