package mysql

import (
	"context"
	"database/sql"
	"sync"
	"time"
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
}
