package bench

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
)

// Counter counts the calls that reach the database through a counted
// connector: each statement executed or queried, each prepare, BEGIN, COMMIT,
// ROLLBACK and ping. For PostgreSQL and MySQL each of those is one network
// round trip (with the drivers' steady state: pgx's statement cache warm,
// go-sql-driver with interpolateParams); for SQLite it is one call into the
// in-process engine.
//
// A call the driver declines without reaching the server (driver.ErrSkip,
// which makes database/sql prepare instead) is not counted; the prepare and
// the statement's execution that follow are.
//
// A pgx batch (on the Env's pgx pool) is one round trip however many
// statements it holds, and is counted once, as Batch.
//
// On PostgreSQL the network turns are counted too (Net), as a check on the
// driver-level count: a read that follows a write on the connection.
type Counter struct {
	exec, query, prepare, begin, commit, rollback, ping, batch atomic.Int64
	net                                                        atomic.Int64
}

// Counts is a snapshot of a Counter. Net is not part of Total.
type Counts struct {
	Exec, Query, Prepare, Begin, Commit, Rollback, Ping, Batch int64
	Net                                                        int64
}

// AddQuery counts n round trips that did not go through a counted
// connection (a Redis client's commands, counted by its hook).
func (c *Counter) AddQuery(n int64) { c.query.Add(n) }

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() Counts {
	return Counts{
		Exec: c.exec.Load(), Query: c.query.Load(), Prepare: c.prepare.Load(),
		Begin: c.begin.Load(), Commit: c.commit.Load(), Rollback: c.rollback.Load(),
		Ping: c.ping.Load(), Batch: c.batch.Load(), Net: c.net.Load(),
	}
}

// Total is the number of round trips.
func (n Counts) Total() int64 {
	return n.Exec + n.Query + n.Prepare + n.Begin + n.Commit + n.Rollback + n.Ping + n.Batch
}

// RoundTrips is Total, or the network turns (Net) where those are more: a
// statement run on the driver's own connection (postgres runs its one-row
// statements on pgx's *pgx.Conn under a cancellable context, through
// Unwrap) or prepared by pgx on first use passes no counted call.
func (n Counts) RoundTrips() int64 { return max(n.Total(), n.Net) }

// Statements is the number of round trips that carried SQL (transaction
// control included; a batch counts once).
func (n Counts) Statements() int64 { return n.Total() - n.Ping }

// Sub returns n - m.
func (n Counts) Sub(m Counts) Counts {
	return Counts{
		Exec: n.Exec - m.Exec, Query: n.Query - m.Query, Prepare: n.Prepare - m.Prepare,
		Begin: n.Begin - m.Begin, Commit: n.Commit - m.Commit, Rollback: n.Rollback - m.Rollback,
		Ping: n.Ping - m.Ping, Batch: n.Batch - m.Batch, Net: n.Net - m.Net,
	}
}

// CountingConnector wraps c so that every call of its connections that
// reaches the database is counted in n. Use it with sql.OpenDB.
func CountingConnector(c driver.Connector, n *Counter) driver.Connector {
	return &connector{inner: c, n: n}
}

type connector struct {
	inner driver.Connector
	n     *Counter
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{inner: dc, n: c.n}, nil
}

func (c *connector) Driver() driver.Driver { return c.inner.Driver() }

// conn implements every optional interface database/sql looks for, and
// passes each to the wrapped connection, or answers as database/sql would
// for a connection that lacks it.
type conn struct {
	inner driver.Conn
	n     *Counter
}

var (
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)

// Unwrap returns the driver's own connection, for code that needs it through
// sql.Conn.Raw (the PostgreSQL driver's LISTEN connection reaches *pgx.Conn so).
func (c *conn) Unwrap() driver.Conn { return c.inner }

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.n.prepare.Add(1)
	var s driver.Stmt
	var err error
	if p, ok := c.inner.(driver.ConnPrepareContext); ok {
		s, err = p.PrepareContext(ctx, query)
	} else {
		s, err = c.inner.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &stmt{inner: s, conn: c}, nil
}

func (c *conn) Close() error { return c.inner.Close() }

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.n.begin.Add(1)
	var t driver.Tx
	var err error
	if b, ok := c.inner.(driver.ConnBeginTx); ok {
		t, err = b.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 the fallback database/sql itself uses
		t, err = c.inner.Begin()
	}
	if err != nil {
		return nil, err
	}
	return &tx{inner: t, n: c.n}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.inner.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := e.ExecContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.n.exec.Add(1)
	}
	return r, err
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.inner.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := q.QueryContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.n.query.Add(1)
	}
	return r, err
}

func (c *conn) Ping(ctx context.Context) error {
	p, ok := c.inner.(driver.Pinger)
	if !ok {
		return nil
	}
	c.n.ping.Add(1)
	return p.Ping(ctx)
}

func (c *conn) ResetSession(ctx context.Context) error {
	if r, ok := c.inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *conn) IsValid() bool {
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.inner.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type tx struct {
	inner driver.Tx
	n     *Counter
}

func (t *tx) Commit() error {
	t.n.commit.Add(1)
	return t.inner.Commit()
}

func (t *tx) Rollback() error {
	t.n.rollback.Add(1)
	return t.inner.Rollback()
}

type stmt struct {
	inner driver.Stmt
	conn  *conn
}

var (
	_ driver.StmtExecContext   = (*stmt)(nil)
	_ driver.StmtQueryContext  = (*stmt)(nil)
	_ driver.NamedValueChecker = (*stmt)(nil)
)

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	s.conn.n.exec.Add(1)
	//lint:ignore SA1019 only reached through a driver without StmtExecContext
	return s.inner.Exec(args)
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	s.conn.n.query.Add(1)
	//lint:ignore SA1019 only reached through a driver without StmtQueryContext
	return s.inner.Query(args)
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := s.inner.(driver.StmtExecContext); ok {
		s.conn.n.exec.Add(1)
		return e.ExecContext(ctx, args)
	}
	v, err := values(args)
	if err != nil {
		return nil, err
	}
	return s.Exec(v)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := s.inner.(driver.StmtQueryContext); ok {
		s.conn.n.query.Add(1)
		return q.QueryContext(ctx, args)
	}
	v, err := values(args)
	if err != nil {
		return nil, err
	}
	return s.Query(v)
}

// CheckNamedValue asks the statement, then the connection, as database/sql
// does when neither is wrapped.
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.inner.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return s.conn.CheckNamedValue(nv)
}

func values(args []driver.NamedValue) ([]driver.Value, error) {
	v := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errors.New("bench: named arguments need a driver with StmtExecContext")
		}
		v[i] = a.Value
	}
	return v, nil
}
