package mysql

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencekit/fence/internal/driver"
)

// stmtCache holds server-side prepared statements for the hot lease
// statements. With interpolateParams the server parses every statement
// anew, and for the acquire (an INSERT ... ON DUPLICATE KEY UPDATE of seven
// IFs) the parse is a third of its cost: measured on MariaDB 10.11,
// interleaved, a refused acquire 181us ad hoc and 94us prepared, a takeover
// 312us and 224us against a 217us single-row UPDATE. A prepared statement
// executes in one round trip (COM_STMT_EXECUTE); database/sql prepares it
// once on each connection it runs on (one more round trip, the first time
// on that connection).
//
// Statements that must run on a pinned connection (MySQL 8's acquire and the
// revoke, which read LAST_INSERT_ID() back on it) stay ad hoc. The cache is separate
// from the Driver so that a cleanup attached to the Driver can close the
// statements when it is garbage.
type stmtCache struct {
	mu        sync.Mutex
	m         map[string]*sql.Stmt
	preparing map[string]bool
	// fenced holds Store.Exec's statements by text (PreparedExecer); a nil
	// entry is a text that runs ad hoc.
	fenced map[string]*sql.Stmt
}

// run calls fn with the prepared statement of query key, or, while it is
// not prepared yet, with nil: the caller then runs the query ad hoc, and
// the statement is prepared in the background. So the first call costs one
// round trip like every later one, not a prepare and an execute.
func (d *Driver) run(key string, fn func(st *sql.Stmt) error) error {
	c := d.stmts
	c.mu.Lock()
	st := c.m[key]
	if st == nil && !c.preparing[key] {
		c.preparing[key] = true
		go d.prepare(key)
	}
	c.mu.Unlock()
	return fn(st)
}

func (d *Driver) prepare(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := d.db.PrepareContext(ctx, d.q[key])
	c := d.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.preparing, key) // on an error, the next call tries again
	if err == nil {
		c.m[key] = st
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, st := range c.m {
		st.Close()
		delete(c.m, k)
	}
	for k, st := range c.fenced {
		if st != nil {
			st.Close()
		}
		delete(c.fenced, k)
	}
}

// maxFenced bounds the Store.Exec statement texts kept prepared per Driver
// (each is prepared again on every pooled connection it runs on). A program
// has a fixed set of statement texts (the token's values are arguments);
// past the bound, statements run ad hoc as before. Entries are never
// evicted: a statement in use by one goroutine must not be closed by
// another.
const maxFenced = 128

// maxFencedLen is the longest Store.Exec text kept prepared: the cache
// then holds at most maxFenced × maxFencedLen bytes of text (the root's
// rewrite cache has the same bound), and a statement built with a long
// list of placeholders, which may pass the 65,535 a prepared statement
// takes, runs ad hoc as before.
const maxFencedLen = 4096

// PreparedExecer returns the Execer Store.Exec runs its statements on (not
// on Galera, where Store.Exec runs them in a transaction of its own): the
// driver's handle, each statement text prepared once and kept. The guard
// makes a fenced statement about twice as long as the caller's, and with
// interpolateParams the server parses all of it on every call; prepared, it
// is parsed once per connection (measured on MariaDB 10.11 in the commit
// that added this). With interpolateParams=false the ad-hoc path costs a
// prepare, an execute and a close per call; this one, one execute. Each
// statement runs in autocommit, as on the handle.
//
// The first call of a text prepares it (one more round trip, once); a text
// the server will not prepare runs ad hoc from then on. The server's
// max_prepared_stmt_count is global, shared with every client, and each
// text is prepared on every pooled connection it runs on: a connection the
// server refuses one more statement (error 1461, before anything ran) runs
// it ad hoc.
func (d *Driver) PreparedExecer() driver.Execer { return preparedExec{d} }

type preparedExec struct{ d *Driver }

func (p preparedExec) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := p.d.fencedStmt(ctx, query)
	if err != nil || st == nil {
		res, xerr := p.d.db.ExecContext(ctx, query, args...)
		if err != nil && xerr == nil && !isPrepareLimit(err) {
			// The statement is fine ad hoc but the server did not prepare
			// it: do not ask again (unless it was only at its limit).
			p.d.stmts.noPrepare(query)
		}
		return res, xerr
	}
	res, err := st.ExecContext(ctx, args...)
	if isPrepareLimit(err) {
		// database/sql prepares the statement on each pooled connection it
		// runs on; this one could not, so nothing ran: run it ad hoc.
		return p.d.db.ExecContext(ctx, query, args...)
	}
	return res, err
}

// erMaxPreparedStmtCount is the server's refusal to prepare past its
// max_prepared_stmt_count (a global limit, shared with every client).
const erMaxPreparedStmtCount = 1461

func isPrepareLimit(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == erMaxPreparedStmtCount
}

// fencedStmt returns the prepared statement of a Store.Exec text, preparing
// it on first use; nil when the cache is full or the text is not prepared.
func (d *Driver) fencedStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if len(query) > maxFencedLen {
		return nil, nil
	}
	c := d.stmts
	c.mu.Lock()
	st, ok := c.fenced[query]
	full := len(c.fenced) >= maxFenced
	c.mu.Unlock()
	if ok || full {
		return st, nil
	}
	st, err := d.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.fenced[query]; ok || len(c.fenced) >= maxFenced {
		st.Close()
		return old, nil
	}
	if c.fenced == nil {
		c.fenced = map[string]*sql.Stmt{}
	}
	c.fenced[query] = st
	return st, nil
}

// noPrepare records that query runs ad hoc (a nil entry).
func (c *stmtCache) noPrepare(query string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.fenced[query]; !ok && len(c.fenced) < maxFenced {
		if c.fenced == nil {
			c.fenced = map[string]*sql.Stmt{}
		}
		c.fenced[query] = nil
	}
}
