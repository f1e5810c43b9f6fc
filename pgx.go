package fence

import (
	"context"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence/postgres"
)

// The pgx-native path: a Store over pgx's own pool, for programs that use
// pgx directly and never open a database/sql handle. Everything on Store
// works the same on it (leases, runs, the runner, AcquireWait's LISTEN); the
// caller's own fenced writes take pgx types here instead of database/sql's.

// PgxExecer is what a pgx-native fenced write runs on: pgx.Tx, *pgx.Conn,
// *pgxpool.Pool and *pgxpool.Conn all have this method.
type PgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// OpenPool returns a PostgreSQL store over pgx's own pool, with no
// database/sql in between. The caller keeps ownership of pool: Close does not
// close it. It checks the pool's settings as OpenDB checks a handle (see
// OpenDB; postgres.NewPoolConfig forces them). DB returns nil for such a
// store; fenced writes in the caller's transactions use ExecPgx, InPgxTx and
// CheckPgxTx.
func OpenPool(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	s, err := newStore(Postgres, opts)
	if err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: nil *pgxpool.Pool", ErrInvalid)
	}
	d, err := postgres.NewPool(pool, s.prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := checkSession(ctx, d.CheckSession); err != nil {
		return nil, err // a pool with a wrong setting, as OpenDB refuses a handle
	}
	s.drv, s.pool = d, pool
	return s, nil
}

// Pool returns the pgx pool of a store made by OpenPool, and nil otherwise.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// ExecPgx is ExecIn for pgx's own API: it runs the caller's UPDATE, DELETE
// or INSERT … SELECT on e with the fence predicate where query says
// {{fence}}, and the same results: the rows affected, or an error wrapping
// ErrLost or ErrNoMatch when nothing changed.
//
//	n, err := store.ExecPgx(ctx, tx, tok,
//		`UPDATE reports SET body = $1 WHERE id = $2 AND {{fence}}`, body, id)
//
// It works on any PostgreSQL store, also one made by Open or OpenDB, when
// the caller writes through pgx elsewhere.
func (s *Store) ExecPgx(ctx context.Context, e PgxExecer, t Token, query string, args ...any) (n int64, err error) {
	if s.dialect != Postgres {
		return 0, fmt.Errorf("%w: ExecPgx needs a PostgreSQL store, this one is %s", ErrInvalid, s.dialect)
	}
	ctx, done := s.observe(ctx, OpWrite, t.Lease)
	defer func() { done(Event{Fence: t.Fence, Err: err}) }()
	q, all, err := s.Fenced(t, query, args...)
	if err != nil {
		return 0, err
	}
	if err := notSent(ctx, "fenced write", t.Lease); err != nil {
		return 0, err
	}
	tag, err := e.Exec(ctx, q, all...)
	if err != nil {
		return 0, s.wrapWrite("fenced write", t.Lease, err)
	}
	if n = tag.RowsAffected(); n == 0 {
		return 0, s.noRows(ctx, t, "write")
	}
	return n, nil
}

// InPgxTx is InTx for a store made by OpenPool: fn runs in a pgx transaction
// that first share-locks the lease row and verifies t by the database clock,
// so a takeover cannot commit between the check and fn's writes. If t no
// longer holds the lease, fn is not called and the error wraps ErrLost. fn's
// error rolls back.
func (s *Store) InPgxTx(ctx context.Context, t Token, fn func(tx pgx.Tx) error) error {
	if s.pool == nil {
		return fmt.Errorf("%w: InPgxTx needs a store made by OpenPool; use InTx", ErrInvalid)
	}
	if err := validateToken(t); err != nil {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.wrap("begin", t.Lease, err)
	}
	if err := s.CheckPgxTx(ctx, tx, t); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return s.wrapWrite("commit", t.Lease, err)
	}
	return nil
}

// CheckPgxTx is CheckTx for a pgx transaction: it share-locks the lease row
// inside tx and verifies t by the database clock. Call it before the
// transaction's writes; they are then fenced until commit.
//
// tx must be a top-level transaction (from Begin on a pool or connection).
// A nested one, from tx.Begin, is a SAVEPOINT: its rollback would release
// the share lock and let a takeover commit before the outer transaction's
// writes, so CheckPgxTx refuses it with ErrInvalid. See CheckTx about
// savepoints run as SQL, which fence cannot see.
func (s *Store) CheckPgxTx(ctx context.Context, tx pgx.Tx, t Token) (err error) {
	d, ok := s.drv.(*postgres.Driver)
	if !ok {
		return fmt.Errorf("%w: CheckPgxTx needs a PostgreSQL store, this one is %s", ErrInvalid, s.dialect)
	}
	ctx, done := s.observe(ctx, OpTx, t.Lease)
	defer func() { done(Event{Fence: t.Fence, Err: err}) }()
	if err := validateToken(t); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("%w: CheckPgxTx needs the caller's pgx.Tx, got nil", ErrInvalid)
	}
	if isPgxSavepoint(tx) {
		return fmt.Errorf("%w: CheckPgxTx got a nested pgx transaction (a SAVEPOINT): rolling it back would release the lease lock while the outer transaction goes on; call CheckPgxTx on the outer transaction, or fence each write with ExecPgx and {{fence}}", ErrInvalid)
	}
	held, err := d.LockTxPgx(ctx, tx, tp(t))
	if err != nil {
		return s.wrap("fenced transaction", t.Lease, err)
	}
	if !held {
		return s.lost(ctx, t, "transaction")
	}
	return nil
}

// isPgxSavepoint reports whether tx is pgx's simulated nested transaction,
// which pgx implements with SAVEPOINT. pgx does not export the type, so it
// is known by name; pgxpool's Tx wraps only top-level transactions.
func isPgxSavepoint(tx pgx.Tx) bool {
	return reflect.TypeOf(tx).String() == "*pgx.dbSimulatedNestedTx"
}

// ExecResourcePgx is ExecResource for pgx's own API, on PostgreSQL: each
// {{fence_token}} in query becomes a bound parameter carrying t's fence, and
// zero rows affected gives an error wrapping ErrStale and ErrLost.
func ExecResourcePgx(ctx context.Context, e PgxExecer, t Token, query string, args ...any) (int64, error) {
	q, all, err := resourceSQL(Postgres, t, query, args)
	if err != nil {
		return 0, err
	}
	tag, err := e.Exec(ctx, q, all...)
	if err != nil {
		return 0, fmt.Errorf("fence: resource write of lease %q fence %d: %w", t.Lease, t.Fence, err)
	}
	if tag.RowsAffected() == 0 {
		return 0, &StaleError{Lease: t.Lease, Fence: t.Fence}
	}
	return tag.RowsAffected(), nil
}
