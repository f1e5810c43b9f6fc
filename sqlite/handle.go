package sqlite

import (
	"time"

	"github.com/fencekit/fence/internal/driver"
)

var _ driver.Handle = (*Driver)(nil)

// OpenDriver opens the SQLite file with Open (WAL, synchronous FULL, busy timeout) and returns a driver that owns the handle:
// fence.New bounds its pool and the store's Close closes it. It does not
// connect; fence.New does. prefix "" means "fence_".
func OpenDriver(file, prefix string) (*Driver, error) {
	db, err := Open(file)
	if err != nil {
		return nil, err
	}
	d, err := New(db, prefix)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.owned = true
	d.memory = file == ":memory:"
	return d, nil
}

// Prefix returns the table prefix of the driver's statements.
func (d *Driver) Prefix() string { return d.prefix }

// WithPrefix returns a driver over the same handle with another table
// prefix. The two share the handle, and whether Close closes it.
func (d *Driver) WithPrefix(prefix string) (driver.Handle, error) {
	n, err := New(d.db, prefix)
	if err != nil {
		return nil, err
	}
	n.owned, n.memory = d.owned, d.memory
	return n, nil
}

// LimitPool bounds the pool of a handle OpenDriver opened; a caller's
// handle is the caller's to size.
func (d *Driver) LimitPool(maxOpen int, maxLifetime, maxIdleTime time.Duration) {
	if d.memory {
		return // every connection to :memory: is another database: Open keeps one
	}
	driver.LimitOwned(d.db, d.owned, maxOpen, maxLifetime, maxIdleTime)
}

// Close closes the handle if OpenDriver opened it, and nothing otherwise.
// A store made over d (fence.New) uses that handle: close the store,
// not d, while the store is in use.
func (d *Driver) Close() error {
	return driver.CloseOwned(d.db, d.owned)
}
