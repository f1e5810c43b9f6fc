package sqlite

import (
	"context"
	"database/sql"
	"sync"

	"github.com/fencekit/fence/internal/driver"
)

// stmtCache holds the driver's prepared statements. modernc prepares every
// ad-hoc statement anew, and for a lease operation the parse is most of its
// CPU (measured: is-held 29µs ad hoc, 9µs prepared; the 2026-12-02 round of
// docs/BENCHMARKS.md, in git at 0c87e8d).
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
	// fenced counts the entries of m that are Store.Exec statements.
	fenced int
	// free maps a lease this Driver released or revoked to the fence it
	// left on the row, the compare-and-set LeaseAcquire tries first.
	free map[string]int64
}

// maxFree bounds free: past it the hints start over (a hint is only ever a
// first guess).
const maxFree = 1024

// freed records that this Driver freed lease name, leaving fence f.
func (c *stmtCache) freed(name string, f int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.free == nil || len(c.free) >= maxFree {
		c.free = map[string]int64{}
	}
	c.free[name] = f
}

// takeFreed returns and forgets the fence this Driver left on name when it
// freed it, if it did last: one acquisition tries it.
func (c *stmtCache) takeFreed(name string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.free[name]
	if ok {
		delete(c.free, name)
	}
	return f, ok
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
	return d.prepared(ctx, key, d.q[key], false)
}

// prepared returns the statement cached under key, preparing text on first
// use. A fenced statement (Store.Exec's) is cached only while fewer than
// maxFenced are: nil then, and the caller runs it unprepared.
func (d *Driver) prepared(ctx context.Context, key, text string, fenced bool) (*sql.Stmt, error) {
	c := d.stmts
	c.mu.Lock()
	st := c.m[key]
	full := fenced && c.fenced >= maxFenced
	c.mu.Unlock()
	if st != nil || full {
		return st, nil
	}
	st, err := d.db.PrepareContext(ctx, text)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[key]; old != nil {
		st.Close()
		return old, nil
	}
	if fenced {
		if c.fenced >= maxFenced {
			st.Close()
			return nil, nil
		}
		c.fenced++
	}
	c.m[key] = st
	return st, nil
}

// maxFenced bounds the Store.Exec statements kept prepared per Driver. A
// program has a fixed set of statement texts (the token's values are
// arguments), so the bound only matters to one that builds its texts with
// values in them; past it, statements run unprepared as before. Entries are
// never evicted: a statement in use by one goroutine must not be closed by
// another.
const maxFenced = 128

// PreparedExecer returns the Execer Store.Exec runs its statements on: the
// driver's handle, each statement text prepared once and kept (modernc
// parses every unprepared statement anew, measured at about a quarter of a
// fenced write's CPU; docs/benchmarks/2026-12-04b/sqlite.md in git at
// 0c87e8d). Each runs in
// autocommit.
func (d *Driver) PreparedExecer() driver.Execer { return preparedExec{d} }

type preparedExec struct{ d *Driver }

func (p preparedExec) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := p.d.prepared(ctx, "fenced\x00"+query, query, true)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return p.d.db.ExecContext(ctx, query, args...)
	}
	return st.ExecContext(ctx, args...)
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, st := range c.m {
		st.Close()
		delete(c.m, k)
	}
	c.fenced = 0
}
