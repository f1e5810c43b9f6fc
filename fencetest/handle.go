package fencetest

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fencepgx"
	"github.com/fencekit/fence/postgres"
)

// handle is how a case reaches the database besides the store's own calls:
// its setup SQL, its reads, its own transactions and the caller-side fenced
// writes. A store over a pgx pool (postgres.NewPool) has no *sql.DB, and
// its users write through pgx, so on it every case takes the pgx-native
// path (fencepgx.Exec, InTx, CheckTx, ExecResource) instead of
// database/sql's; the statements and the assertions stay the same.
type handle interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
	queryRow(ctx context.Context, q string, args ...any) row
	query(ctx context.Context, q string, args ...any) (rows, error)
	// begin starts the caller's own transaction; sql.LevelDefault is the
	// database's default level.
	begin(ctx context.Context, iso sql.IsolationLevel) (txHandle, error)
	// inTx is InTx, or fencepgx.InTx on a pool store.
	inTx(ctx context.Context, tok fence.Token, fn func(txHandle) error) error
	// execResource is ExecResource, or fencepgx.ExecResource on a pool store.
	execResource(ctx context.Context, tok fence.Token, q string, args ...any) (int64, error)
	// reopen is another store over the same handle (fencedsn.OpenDB, or New over postgres.NewPool).
	reopen(opts ...fence.Option) (*fence.Store, error)
	// close takes the database away from the store.
	close()
}

type txHandle interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
	queryRow(ctx context.Context, q string, args ...any) row
	// fencedExec is ExecIn on this transaction, or fencepgx.Exec.
	fencedExec(ctx context.Context, tok fence.Token, q string, args ...any) (int64, error)
	// check is CheckTx on this transaction, or fencepgx.CheckTx.
	check(ctx context.Context, tok fence.Token) error
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

// row and rows are what *sql.Row(s) and pgx's rows have in common. pgx's
// ErrNoRows wraps sql.ErrNoRows, so one test for "no row" serves both.
type row interface{ Scan(dest ...any) error }

type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

func handleFor(s *fence.Store) handle {
	if d, ok := s.Driver().(*postgres.Driver); ok && d.Pool() != nil {
		return pgxHandle{s, d.Pool()}
	}
	return sqlHandle{s}
}

// sqlHandle is database/sql over s.DB().
type sqlHandle struct{ s *fence.Store }

func (h sqlHandle) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := h.s.DB().ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (h sqlHandle) queryRow(ctx context.Context, q string, args ...any) row {
	return h.s.DB().QueryRowContext(ctx, q, args...)
}

func (h sqlHandle) query(ctx context.Context, q string, args ...any) (rows, error) {
	r, err := h.s.DB().QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

func (h sqlHandle) begin(ctx context.Context, iso sql.IsolationLevel) (txHandle, error) {
	var opts *sql.TxOptions
	if iso != sql.LevelDefault {
		opts = &sql.TxOptions{Isolation: iso}
	}
	tx, err := h.s.DB().BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return sqlTx{h.s, tx}, nil
}

func (h sqlHandle) inTx(ctx context.Context, tok fence.Token, fn func(txHandle) error) error {
	return h.s.InTx(ctx, tok, func(tx *sql.Tx) error { return fn(sqlTx{h.s, tx}) })
}

func (h sqlHandle) execResource(ctx context.Context, tok fence.Token, q string, args ...any) (int64, error) {
	return fence.ExecResource(ctx, h.s.DB(), h.s.Dialect(), tok, q, args...)
}

func (h sqlHandle) reopen(opts ...fence.Option) (*fence.Store, error) {
	return fencedsn.OpenDB(context.Background(), h.s.DB(), h.s.Dialect(), opts...)
}

func (h sqlHandle) close() { h.s.DB().Close() }

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

type sqlTx struct {
	s  *fence.Store
	tx *sql.Tx
}

func (t sqlTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) queryRow(ctx context.Context, q string, args ...any) row {
	return t.tx.QueryRowContext(ctx, q, args...)
}

func (t sqlTx) fencedExec(ctx context.Context, tok fence.Token, q string, args ...any) (int64, error) {
	return t.s.ExecIn(ctx, t.tx, tok, q, args...)
}

func (t sqlTx) check(ctx context.Context, tok fence.Token) error { return t.s.CheckTx(ctx, t.tx, tok) }
func (t sqlTx) commit(context.Context) error                     { return t.tx.Commit() }
func (t sqlTx) rollback(context.Context) error                   { return t.tx.Rollback() }

// pgxHandle is pgx over the pool of s's driver.
type pgxHandle struct {
	s    *fence.Store
	pool *pgxpool.Pool
}

func (h pgxHandle) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := h.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (h pgxHandle) queryRow(ctx context.Context, q string, args ...any) row {
	return h.pool.QueryRow(ctx, q, args...)
}

func (h pgxHandle) query(ctx context.Context, q string, args ...any) (rows, error) {
	return h.pool.Query(ctx, q, args...)
}

func (h pgxHandle) begin(ctx context.Context, iso sql.IsolationLevel) (txHandle, error) {
	var opts pgx.TxOptions
	switch iso {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		opts.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		opts.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead:
		opts.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		opts.IsoLevel = pgx.Serializable
	default:
		return nil, fmt.Errorf("fencetest: pgx has no isolation level %v", iso)
	}
	tx, err := h.pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return pgxTx{h.s, tx}, nil
}

func (h pgxHandle) inTx(ctx context.Context, tok fence.Token, fn func(txHandle) error) error {
	return fencepgx.InTx(ctx, h.s, h.pool, tok, func(tx pgx.Tx) error { return fn(pgxTx{h.s, tx}) })
}

func (h pgxHandle) execResource(ctx context.Context, tok fence.Token, q string, args ...any) (int64, error) {
	return fencepgx.ExecResource(ctx, h.pool, tok, q, args...)
}

func (h pgxHandle) reopen(opts ...fence.Option) (*fence.Store, error) {
	d, err := postgres.NewPool(h.pool, "")
	if err != nil {
		return nil, err
	}
	return fence.New(context.Background(), d, opts...)
}

// close does not wait: pgxpool's Close blocks until every acquired
// connection is released, and the store may be using one (a renewal in
// flight) while the caller waits for the store to notice. New acquires are
// refused at once; Backend's cleanup, closing the pool too, waits for the
// rest.
func (h pgxHandle) close() { go h.pool.Close() }

type pgxTx struct {
	s  *fence.Store
	tx pgx.Tx
}

func (t pgxTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (t pgxTx) queryRow(ctx context.Context, q string, args ...any) row {
	return t.tx.QueryRow(ctx, q, args...)
}

func (t pgxTx) fencedExec(ctx context.Context, tok fence.Token, q string, args ...any) (int64, error) {
	return fencepgx.Exec(ctx, t.s, t.tx, tok, q, args...)
}

func (t pgxTx) check(ctx context.Context, tok fence.Token) error {
	return fencepgx.CheckTx(ctx, t.s, t.tx, tok)
}

func (t pgxTx) commit(ctx context.Context) error { return t.tx.Commit(ctx) }

// rollback outlives ctx: a case rolls back after its context ended too, and
// pgx would otherwise close the connection instead.
func (t pgxTx) rollback(ctx context.Context) error {
	return t.tx.Rollback(context.WithoutCancel(ctx))
}
