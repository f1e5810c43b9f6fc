package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache holds the driver's prepared statements. modernc prepares every
// ad-hoc statement anew, and for a lease operation the parse is most of its
// CPU (measured: is-held 29µs ad hoc, 9µs prepared; docs/BENCHMARKS.md).
// database/sql prepares a *sql.Stmt again on each connection it runs on, and
// SQLite re-prepares it by itself after a schema change.
//
// The cache is separate from the Driver so that a cleanup attached to the
// Driver can close the statements when the Driver is garbage: a Store opened
// over a long-lived handle and then dropped leaves nothing prepared behind.
type stmtCache struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
	// file is the main database's file as SQLite names it ("" in memory),
	// the key of the in-process handoff (handoff.go), read once (CheckSession
	// reads it anyway); fileKnown says it has been.
	file      string
	fileKnown bool
}

func (c *stmtCache) setFile(file string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.file, c.fileKnown = file, true
}

// dbFile returns the main database's file, reading it on first use.
func (d *Driver) dbFile(ctx context.Context) (string, error) {
	c := d.stmts
	c.mu.Lock()
	file, ok := c.file, c.fileKnown
	c.mu.Unlock()
	if ok {
		return file, nil
	}
	if err := d.db.QueryRowContext(ctx, d.q["db_file"]).Scan(&file); err != nil {
		return "", err
	}
	c.setFile(file)
	return file, nil
}

// stmt returns the prepared statement of query file key.
func (d *Driver) stmt(ctx context.Context, key string) (*sql.Stmt, error) {
	c := d.stmts
	c.mu.Lock()
	st := c.m[key]
	c.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := d.db.PrepareContext(ctx, d.q[key])
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[key]; old != nil {
		st.Close()
		return old, nil
	}
	c.m[key] = st
	return st, nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, st := range c.m {
		st.Close()
		delete(c.m, k)
	}
}
