package bench

import (
	"context"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence/postgres"
)

// pgxTracer counts what a pgx pool sends, as the counting connector does for
// database/sql: each query is one round trip (BEGIN, COMMIT and ROLLBACK by
// their text, a statement that answered SELECT as a query, any other as an
// exec), each batch one round trip however many statements it holds, each
// explicit Prepare one. A statement prepared on first use by pgx's statement
// cache, and pgxpool's ping of a connection idle for more than a second, are
// not traced; the network turns (Net) see them.
type pgxTracer struct{ n *Counter }

var (
	_ pgx.QueryTracer   = pgxTracer{}
	_ pgx.BatchTracer   = pgxTracer{}
	_ pgx.PrepareTracer = pgxTracer{}
)

func (t pgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	switch strings.ToLower(strings.TrimSpace(d.SQL)) {
	case "begin":
		t.n.begin.Add(1)
		return context.WithValue(ctx, pgxCounted{}, true)
	case "commit":
		t.n.commit.Add(1)
		return context.WithValue(ctx, pgxCounted{}, true)
	case "rollback":
		t.n.rollback.Add(1)
		return context.WithValue(ctx, pgxCounted{}, true)
	}
	return ctx
}

type pgxCounted struct{}

func (t pgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if ctx.Value(pgxCounted{}) != nil {
		return
	}
	if d.CommandTag.Select() {
		t.n.query.Add(1)
	} else {
		t.n.exec.Add(1)
	}
}

func (t pgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.n.batch.Add(1)
	return ctx
}

func (pgxTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (pgxTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (t pgxTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	t.n.prepare.Add(1)
	return ctx
}

func (pgxTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// Pgx returns a pgx pool on e's PostgreSQL database, opened on first use
// with postgres.NewPoolConfig and closed by Close, whose round trips are
// counted in e.Count as the database/sql handle's are: for the cases that
// measure fence's pgx API (fencepgx) next to plain pgx.
func (e *Env) Pgx(ctx context.Context) (*pgxpool.Pool, error) {
	if e.pool != nil {
		return e.pool, nil
	}
	cfg, err := postgres.NewPoolConfig(e.dsn)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{KeepAlive: 5 * time.Minute}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &turnConn{Conn: c, n: &e.Count.net}, nil
	}
	cfg.ConnConfig.Tracer = pgxTracer{n: e.Count}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, err
	}
	e.pool = p
	return p, nil
}
