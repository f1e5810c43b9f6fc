package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// conn is the handle the driver runs its statements on. Two implement it, so
// that database/sql users and pgx-native users run the same embedded SQL
// with the same locking and the same clock: sqlConn over a *sql.DB opened
// with pgx's stdlib driver, and poolConn over a *pgxpool.Pool.
type conn interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
	queryRow(ctx context.Context, q string, args ...any) row
	query(ctx context.Context, q string, args ...any) (rows, error)
	begin(ctx context.Context) (tx, error)
	// session returns a connection of its own, outside the pool's rotation,
	// for the handoff hub's LISTEN and presence locks.
	session(ctx context.Context) (session, error)
}

type row interface{ Scan(dest ...any) error }

type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

type tx interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
	queryRow(ctx context.Context, q string, args ...any) row
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

type session interface {
	exec(ctx context.Context, q string, args ...any) error
	// waitForNotification blocks until a NOTIFY this session LISTENs for
	// arrives, and returns its payload.
	waitForNotification(ctx context.Context) (string, error)
	// discard closes the session instead of returning it to the pool: it
	// may still LISTEN or hold advisory locks.
	discard()
}

// sqlConn is conn over database/sql.
type sqlConn struct{ db *sql.DB }

func (c sqlConn) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := c.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryRow runs a one-row statement. With a context that can be cancelled,
// database/sql starts a goroutine for every query (Rows.awaitDone, to close
// the rows on cancellation), none for an Exec; on 2 vCPUs that cost a renew
// 13-17µs of its 280µs (fence bench's renew_cancel_ctx against renew). So
// with such a context the statement runs on the connection's own *pgx.Conn
// (rawRow), whose cancellation is a context.AfterFunc; other drivers, and a
// context that cannot be cancelled, keep database/sql's path.
func (c sqlConn) queryRow(ctx context.Context, q string, args ...any) row {
	if ctx.Done() == nil {
		return c.db.QueryRowContext(ctx, q, args...)
	}
	return rawRow{db: c.db, ctx: ctx, q: q, args: args}
}

// rawRow is queryRow's statement, run when Scan is called: on a connection
// taken from db's pool, through pgx itself when the driver connection is
// pgx's (pgxConn), else through database/sql on that connection.
type rawRow struct {
	db   *sql.DB
	ctx  context.Context
	q    string
	args []any
}

func (r rawRow) Scan(dest ...any) error {
	c, err := r.db.Conn(r.ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	viaPgx := false
	err = c.Raw(func(dc any) error {
		pc, ok := pgxConn(dc)
		if !ok {
			return nil
		}
		viaPgx = true
		// pgx closes a connection that failed in transit; the pool then
		// drops it when it is next taken (pgx's ResetSession).
		return pc.QueryRow(r.ctx, r.q, r.args...).Scan(dest...)
	})
	if viaPgx || err != nil {
		return err
	}
	return c.QueryRowContext(r.ctx, r.q, r.args...).Scan(dest...)
}

func (c sqlConn) query(ctx context.Context, q string, args ...any) (rows, error) {
	r, err := c.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

func (c sqlConn) begin(ctx context.Context) (tx, error) {
	t, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{t}, nil
}

func (c sqlConn) session(ctx context.Context) (session, error) {
	sc, err := c.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return sqlSession{sc}, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

type sqlTx struct{ t *sql.Tx }

func (t sqlTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := t.t.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) queryRow(ctx context.Context, q string, args ...any) row {
	return t.t.QueryRowContext(ctx, q, args...)
}

func (t sqlTx) commit(context.Context) error   { return t.t.Commit() }
func (t sqlTx) rollback(context.Context) error { return t.t.Rollback() }

type sqlSession struct{ c *sql.Conn }

func (s sqlSession) exec(ctx context.Context, q string, args ...any) error {
	_, err := s.c.ExecContext(ctx, q, args...)
	return err
}

func (s sqlSession) waitForNotification(ctx context.Context) (string, error) {
	var payload string
	err := s.c.Raw(func(dc any) error {
		pc, ok := pgxConn(dc)
		if !ok {
			return errors.Join(sqldriver.ErrBadConn, errNoPgx)
		}
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			// Mark the session bad: it is still LISTENing.
			return errors.Join(sqldriver.ErrBadConn, err)
		}
		payload = n.Payload
		return nil
	})
	return payload, err
}

func (s sqlSession) discard() {
	_ = s.c.Raw(func(any) error { return sqldriver.ErrBadConn })
	s.c.Close()
}

// pgxConn finds the *pgx.Conn under a database/sql driver connection, also
// through wrappers (instrumentation) that offer Unwrap.
func pgxConn(dc any) (*pgx.Conn, bool) {
	for {
		switch c := dc.(type) {
		case interface{ Conn() *pgx.Conn }:
			return c.Conn(), true
		case interface{ Unwrap() sqldriver.Conn }:
			dc = c.Unwrap()
		default:
			return nil, false
		}
	}
}

// poolConn is conn over pgx's own pool, with no database/sql in between.
type poolConn struct{ p *pgxpool.Pool }

func (c poolConn) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := c.p.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (c poolConn) queryRow(ctx context.Context, q string, args ...any) row {
	return c.p.QueryRow(ctx, q, args...)
}

func (c poolConn) query(ctx context.Context, q string, args ...any) (rows, error) {
	return c.p.Query(ctx, q, args...)
}

func (c poolConn) begin(ctx context.Context) (tx, error) {
	t, err := c.p.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgxTx{t}, nil
}

// session takes a connection from the pool and hijacks it at once: it was
// made with the pool's own hooks (AfterConnect and the like), but it no
// longer counts against the pool's size, and closing the pool does not wait
// for the hub to let it go.
func (c poolConn) session(ctx context.Context) (session, error) {
	pc, err := c.p.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return poolSession{pc.Hijack()}, nil
}

type pgxTx struct{ t pgx.Tx }

func (t pgxTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.t.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (t pgxTx) queryRow(ctx context.Context, q string, args ...any) row {
	return t.t.QueryRow(ctx, q, args...)
}

func (t pgxTx) commit(ctx context.Context) error { return t.t.Commit(ctx) }

// rollback ignores ctx's end: a rollback that cannot be sent leaves a
// transaction that the server ends when pgx closes the connection.
func (t pgxTx) rollback(ctx context.Context) error {
	return t.t.Rollback(context.WithoutCancel(ctx))
}

type poolSession struct{ c *pgx.Conn }

func (s poolSession) exec(ctx context.Context, q string, args ...any) error {
	_, err := s.c.Exec(ctx, q, args...)
	return err
}

func (s poolSession) waitForNotification(ctx context.Context) (string, error) {
	n, err := s.c.WaitForNotification(ctx)
	if err != nil {
		return "", err
	}
	return n.Payload, nil
}

// discard closes the connection, ending its LISTEN and advisory locks.
func (s poolSession) discard() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.c.Close(ctx)
}
