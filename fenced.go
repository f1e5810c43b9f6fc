package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencekit/fence/internal/driver"
)

// Execer is what a fenced write runs on: *sql.DB, *sql.Tx or *sql.Conn.
// (fencepgx.Execer is its pgx-native counterpart.)
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Exec runs the caller's UPDATE, DELETE or INSERT … SELECT fenced: the
// fence predicate is joined to the statement itself (at the front of its
// WHERE, or bounding the SELECT that feeds the INSERT), so the check and the
// write are one statement and a racing takeover serialises with it. query
// says {{fence}} in its WHERE to ask for it:
//
//	n, err := store.Exec(ctx, tok,
//		`UPDATE reports SET body = ? WHERE id = ? AND {{fence}}`, body, id)
//
// Write ? placeholders on every database (on PostgreSQL they are rebound to
// $1…, and $1… works too); fence adds its own arguments. The statement must
// be one of the shapes in the package doc's table (one UPDATE, DELETE or
// INSERT … SELECT, {{fence}} a condition of its WHERE); anything else is
// ErrInvalid and nothing is sent. It returns the rows
// affected. Zero rows is an error: wrapping ErrLost when the token no
// longer holds the lease, or ErrNoMatch when it still does and the caller's
// own condition matched nothing.
//
// On MySQL, open the database with clientFoundRows=true (Open does) so that a
// matched row that already had the new values is not counted as zero.
//
// On MariaDB Galera Cluster (detected when the store opens) the predicate
// alone does not fence, so the write runs in a transaction that first
// writes the lease row (docs/adr/0006-galera.md): ExecIn on a *sql.Tx joins
// it, on a *sql.DB or *sql.Conn it gets its own. A takeover through another
// node that got in first makes it fail with nothing committed: ErrLost, or a
// retryable error (IsRetryable) while the lease is still held.
func (s *Store) Exec(ctx context.Context, t Token, query string, args ...any) (int64, error) {
	// On SQLite in autocommit too: one statement asks for the write lock
	// before it reads (SQLITE_BUSY_SNAPSHOT is only for a transaction that
	// already read), so its guard reads the lease row under the lock that
	// orders it with a takeover (race cases: RaceTakeoverVersusFencedWrite).
	if s.db == nil {
		// A driver over a pgx pool (postgres.NewPool) runs it on the pool.
		if x, ok := s.drv.(interface {
			Exec(ctx context.Context, query string, args []any) (int64, error)
		}); ok {
			return s.ExecWith(ctx, t, x.Exec, query, args...)
		}
	}
	if p, ok := s.drv.(driver.PreparedExecer); ok {
		// Not where the write needs a transaction of its own (Galera):
		// ExecIn opens it on the handle. An error here, ExecIn reports.
		if inTx, err := s.needsTx(ctx); err == nil && !inTx {
			return s.ExecIn(ctx, p.PreparedExecer(), t, query, args...)
		}
	}
	return s.ExecIn(ctx, s.db, t, query, args...)
}

// ExecWith is Exec through a database client other than database/sql (pgx's
// own API, a query builder's executor): fence rewrites query as Fenced does,
// exec runs it and returns the rows affected, and the results and errors are
// Exec's. exec must run exactly the query and arguments it is given, in one
// statement. fencepgx.Exec is ExecWith over pgx.
//
// On MariaDB Galera Cluster a fenced write needs the lease row written in
// its transaction, which ExecWith cannot do: it refuses with ErrInvalid
// there (use InTx, or CheckTx in the caller's transaction).
func (s *Store) ExecWith(ctx context.Context, t Token, exec func(ctx context.Context, query string, args []any) (int64, error), query string, args ...any) (int64, error) {
	if exec == nil {
		return 0, fmt.Errorf("%w: ExecWith needs an exec function, got nil", ErrInvalid)
	}
	run := func(ctx context.Context, q string, all []any) (int64, error) {
		n, err := exec(ctx, q, all)
		if err != nil {
			return 0, s.wrapWrite("fenced write", t.Lease, err)
		}
		return n, nil
	}
	galera := func(context.Context, string, []any) (int64, error) {
		return 0, fmt.Errorf("%w: on MariaDB Galera Cluster a fenced write must write the lease row in its transaction; use InTx or CheckTx instead of ExecWith", ErrInvalid)
	}
	return s.fencedWrite(ctx, t, query, args, run, galera)
}

// ExecIn is Exec on a given handle, for example inside the caller's own
// transaction.
func (s *Store) ExecIn(ctx context.Context, e Execer, t Token, query string, args ...any) (int64, error) {
	run := func(ctx context.Context, q string, all []any) (int64, error) {
		res, err := e.ExecContext(ctx, q, all...)
		if err != nil {
			return 0, s.wrapWrite("fenced write", t.Lease, err)
		}
		// The statement's answer arrived: an error here is reading it, not
		// an outcome in doubt.
		n, err := res.RowsAffected()
		if err != nil {
			return 0, s.wrap("fenced write", t.Lease, err)
		}
		return n, nil
	}
	galera := func(ctx context.Context, q string, all []any) (int64, error) {
		return s.execGuarded(ctx, e, t, q, all)
	}
	return s.fencedWrite(ctx, t, query, args, run, galera)
}

// fencedWrite is ExecWith's and ExecIn's common part: rewrite the query,
// refuse a context already over, then run it, or on Galera hand it to
// galera (the lease row must be written in the same transaction); a write
// that matched nothing is explained by noRows.
func (s *Store) fencedWrite(ctx context.Context, t Token, query string, args []any,
	run, galera func(ctx context.Context, q string, all []any) (int64, error)) (n int64, err error) {
	ctx, done := s.observe(ctx, OpWrite, t.Lease)
	defer func() { done(Event{Fence: t.Fence, Err: err}) }()
	q, all, err := s.Fenced(t, query, args...)
	if err != nil {
		return 0, err
	}
	if err := notSent(ctx, "fenced write", t.Lease); err != nil {
		return 0, err
	}
	inTx, err := s.needsTx(ctx)
	if err != nil {
		return 0, s.wrap("fenced write", t.Lease, err)
	}
	if inTx {
		return galera(ctx, q, all)
	}
	if n, err = run(ctx, q, all); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, s.noRows(ctx, t, "write")
	}
	return n, nil
}

// Fenced returns query fenced as Exec sends it (the dialect's fence
// predicate placed by fence, {{fence}} made TRUE, ? rebound to $n on
// PostgreSQL), and the full argument list, for callers that run the
// statement themselves (a query builder, QueryContext with RETURNING). The
// predicate is only true while t holds its lease by the database clock, and
// reads the lease row under a share lock where the database needs one
// (PostgreSQL FOR SHARE, MySQL LOCK IN SHARE MODE).
//
// Each {{now_ms}} in query becomes the database clock in integer
// milliseconds, so a fenced write can stamp rows with database time.
//
// On MariaDB Galera Cluster the predicate does not fence by itself (its
// share lock is local to one node): run the statement inside a transaction
// after CheckTx, which there writes the lease row (docs/adr/0006-galera.md).
func (s *Store) Fenced(t Token, query string, args ...any) (string, []any, error) {
	if err := validateToken(t); err != nil {
		return "", nil, err
	}
	// Only a server whose lexer fence's tokenizer was tested against
	// (docs: "Servers and versions" in the package doc) gets a caller's SQL.
	if c, ok := s.drv.(driver.ServerChecker); ok {
		if err := c.FencedSQLRefusal(); err != nil {
			return "", nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	q, all, err := splice(s.dialect, query, args, FenceMarker, 1, func(first int) (string, []any) {
		return s.drv.GuardSQL(tp(t), first)
	})
	if err != nil {
		return "", nil, err
	}
	if q, all, err = s.expandNow(q, all); err != nil {
		return "", nil, err
	}
	// Where the server runs every statement of a text (SQLite), its own
	// lexer decides that the text sent is one statement.
	if c, ok := s.drv.(driver.StatementChecker); ok {
		if err := c.CheckOneStatement(q); err != nil {
			return "", nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	return q, all, nil
}

// expandNow replaces each {{now_ms}} outside literals with the database clock.
func (s *Store) expandNow(q string, args []any) (string, []any, error) {
	if !strings.Contains(q, NowMarker) {
		return q, args, nil
	}
	return splice(s.dialect, q, args, NowMarker, 0, func(int) (string, []any) { return s.drv.NowSQL(), nil })
}

// NowSQL returns the database clock in integer milliseconds as an SQL
// expression of the store's dialect, for statements that stamp rows with
// database time ({{now_ms}} in Exec does the same).
func (s *Store) NowSQL() string { return s.drv.NowSQL() }

// Rebind turns ? placeholders into the dialect's own ($1, $2, … on
// PostgreSQL), leaving string literals, quoted names and comments alone, so
// one query text can serve every database.
func (s *Store) Rebind(query string) string { return Rebind(s.dialect, query) }

// Rebind is Store.Rebind for a dialect. Exec, ExecIn, Fenced and ExecPgx
// rebind ? themselves; Rebind is for the caller's other statements.
func Rebind(d Dialect, query string) string {
	if d != Postgres {
		return query
	}
	toks, err := tokenize(Postgres, query)
	if err != nil {
		return query // malformed SQL: leave it for the database to reject
	}
	var b strings.Builder
	last, n := 0, 0
	for _, t := range toks {
		if t.kind == tParam && t.word == "?" {
			n++
			b.WriteString(query[last:t.pos])
			writeApart(&b, query, t.pos, t.end, "$"+strconv.Itoa(n))
			last = t.end
		}
	}
	b.WriteString(query[last:])
	return b.String()
}

// noRows explains a fenced statement that changed nothing, within the
// caller's deadline (followUp).
func (s *Store) noRows(ctx context.Context, t Token, op string) error {
	rctx, cancel := followUp(ctx)
	defer cancel()
	ok, err := s.drv.LeaseIsHeld(rctx, tp(t))
	if err == nil && ok {
		return fmt.Errorf("%w (lease %q fence %d)", ErrNoMatch, t.Lease, t.Fence)
	}
	return s.lost(rctx, t, op)
}

// InTx runs fn in a transaction that first locks the lease row in share mode
// and verifies t by the database clock, so a takeover cannot commit between
// the check and fn's writes: it waits for this commit, and then this
// transaction's writes are already in. If t no longer holds the lease, fn is
// not called and the error wraps ErrLost. fn's error rolls back.
//
// Keep fn short: the share lock delays renewals and takeovers of this lease
// until commit. On MariaDB Galera CheckTx writes the lease row instead, and a
// takeover through another node that got in first makes the COMMIT fail,
// nothing committed: ErrLost, or a retryable error while the lease is still
// held (docs/adr/0006-galera.md). Under REPEATABLE READ or SERIALIZABLE a racing takeover can
// surface as a serialization failure, reported as retryable (IsRetryable).
func (s *Store) InTx(ctx context.Context, t Token, fn func(tx *sql.Tx) error) error {
	if err := validateToken(t); err != nil {
		return err
	}
	err := s.inTx(ctx, t.Lease, func(tx *sql.Tx) error {
		// The transaction is InTx's own and nothing ran in it yet: the
		// lock is at its top level, so the plain check does.
		if err := s.checkTx(ctx, tx, t, false); err != nil {
			return err
		}
		return fn(tx)
	})
	if inTx, _ := s.needsTx(ctx); inTx {
		// A certification failure at COMMIT refused the whole transaction.
		return s.explainConflict(ctx, t, "transaction", err)
	}
	return err
}

// CheckTx locks the lease row in share mode inside the caller's transaction
// and verifies t by the database clock. Call it before the transaction's
// writes; they are then fenced until commit. The error wraps ErrLost when t
// no longer holds the lease.
//
// The lock belongs to the (sub)transaction that is current when CheckTx
// runs. Call CheckTx at the top level of the transaction, not inside a
// SAVEPOINT you may roll back: ROLLBACK TO SAVEPOINT releases the share lock
// on PostgreSQL and MariaDB/MySQL, a takeover can then commit, and the
// transaction's later writes commit after it unfenced. On PostgreSQL CheckTx
// refuses with ErrInvalid when a savepoint is open (a SAVEPOINT run as SQL, a
// pgx nested transaction); the transaction is then aborted and must be rolled
// back. On MariaDB/MySQL fence cannot see a savepoint: do not call CheckTx
// after one. A write made with ExecIn and {{fence}} is guarded by its own
// statement, in the same subtransaction as the write, so it stays fenced
// inside savepoints. On SQLite the transaction's write lock, not a row lock,
// does the fencing, and a rollback to a savepoint keeps it.
func (s *Store) CheckTx(ctx context.Context, tx *sql.Tx, t Token) error {
	return s.checkTx(ctx, tx, t, true)
}

// checkTx is CheckTx; caller says the transaction is the caller's, which
// may be inside a savepoint (driver.TopLocker).
func (s *Store) checkTx(ctx context.Context, tx *sql.Tx, t Token, caller bool) (err error) {
	ctx, done := s.observe(ctx, OpTx, t.Lease)
	defer func() { done(Event{Fence: t.Fence, Err: err}) }()
	if err := validateToken(t); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("%w: CheckTx needs the caller's *sql.Tx, got nil", ErrInvalid)
	}
	if err := notSent(ctx, "fenced transaction", t.Lease); err != nil {
		return err
	}
	lock := s.drv.LockTx
	top, isTop := s.drv.(driver.TopLocker)
	if caller && isTop {
		lock = top.LockTxTop
	}
	ok, err := lock(ctx, tx, tp(t))
	if err != nil {
		if isTop && top.InSubtransaction(err) {
			return savepointError(t, err)
		}
		return s.wrap("fenced transaction", t.Lease, err)
	}
	if !ok {
		return s.lost(ctx, t, "transaction")
	}
	return nil
}

// savepointError is CheckTx's refusal inside a savepoint.
func savepointError(t Token, err error) error {
	return fmt.Errorf("%w: CheckTx for lease %q fence %d ran inside a savepoint (a SAVEPOINT, or a pgx nested transaction): "+
		"a rollback to it would release the lease lock while the transaction goes on; roll the transaction back and call CheckTx "+
		"at its top level, before any savepoint, or fence each write with {{fence}} (%v)", ErrInvalid, t.Lease, t.Fence, err)
}

// CheckWith is CheckTx through a database client other than database/sql:
// query must run the statement it is given, with its arguments, inside the
// caller's transaction and return the one boolean it selects. The
// statement share-locks the lease row until the transaction ends and is
// true only while t holds the lease by the database clock; the error wraps
// ErrLost when it is false. fencepgx.CheckTx is CheckWith over pgx.
//
// It is available on PostgreSQL; elsewhere it refuses with ErrInvalid.
func (s *Store) CheckWith(ctx context.Context, t Token, query func(ctx context.Context, q string, args []any) (bool, error)) (err error) {
	ctx, done := s.observe(ctx, OpTx, t.Lease)
	defer func() { done(Event{Fence: t.Fence, Err: err}) }()
	if err := validateToken(t); err != nil {
		return err
	}
	l, ok := s.drv.(interface {
		LockSQL(t driver.TokenParams) (string, []any)
	})
	if !ok || query == nil {
		return fmt.Errorf("%w: CheckWith needs a PostgreSQL store and a query function; use CheckTx on %s", ErrInvalid, s.dialect)
	}
	if err := notSent(ctx, "fenced transaction", t.Lease); err != nil {
		return err
	}
	q, args := l.LockSQL(tp(t))
	held, err := query(ctx, q, args)
	if err != nil {
		if top, ok := s.drv.(driver.TopLocker); ok && top.InSubtransaction(err) {
			return savepointError(t, err)
		}
		return s.wrap("fenced transaction", t.Lease, err)
	}
	if !held {
		return s.lost(ctx, t, "transaction")
	}
	return nil
}

func (s *Store) inTx(ctx context.Context, lease string, fn func(tx *sql.Tx) error) error {
	if s.db == nil {
		return fmt.Errorf("%w: this store's driver runs on a pgx pool (postgres.NewPool), not database/sql: use fencepgx.InTx", ErrInvalid)
	}
	if err := notSent(ctx, "begin", lease); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("begin", lease, err)
	}
	if err := fn(tx); err != nil {
		s.rollback(ctx, tx)
		return err
	}
	return s.commit(ctx, tx, "commit", lease)
}

// rollback rolls tx, begun with ctx, back within ctx: once ctx has ended,
// database/sql's watcher does it (or has); on MySQL as a statement
// (driver.TxCommitter), since go-sql-driver's Rollback has no deadline.
func (s *Store) rollback(ctx context.Context, tx *sql.Tx) {
	if ctx.Err() != nil {
		return
	}
	if c, ok := s.drv.(driver.TxCommitter); ok {
		_ = c.RollbackTx(ctx, tx)
		return
	}
	_ = tx.Rollback()
}

// commit commits tx, begun with ctx. Only a COMMIT that may have reached
// the server has an unknown outcome. When ctx has ended, database/sql's
// Tx.Commit returns ctx.Err() without asking the driver (Go 1.26
// database/sql/sql.go, Tx.Commit checks tx.ctx.Done() first), or
// ErrTxDone once the watcher that ctx's end starts (Tx.awaitDone) has
// rolled tx back: both are definite, and carry ctx's cause. The check
// before the call also asks a Run job's keeper (notSent). When ctx has
// ended, that watcher rolls tx back (or has), so it is left to it: on
// MySQL a ROLLBACK has no deadline.
//
// On MySQL the COMMIT is a statement under ctx (driver.TxCommitter):
// go-sql-driver's Tx.Commit has no deadline.
func (s *Store) commit(ctx context.Context, tx *sql.Tx, op, lease string) error {
	if err := notSent(ctx, op, lease); err != nil {
		return err
	}
	c, viaDriver := s.drv.(driver.TxCommitter)
	var err error
	if viaDriver {
		err = c.CommitTx(ctx, tx)
	} else {
		err = tx.Commit()
	}
	if err == nil {
		return nil
	}
	ctxErr := ctx.Err()
	// The same value, not errors.Is: a driver that sent the COMMIT and lost
	// its answer to the cancellation wraps ctx's error in its own (pgx).
	// go-sql-driver returns ctx's error itself also after sending, which is
	// why only database/sql's own Commit is judged by it.
	if ctxErr != nil && (errors.Is(err, sql.ErrTxDone) || !viaDriver && err == ctxErr) {
		return &notSentError{op: op, lease: lease, cause: context.Cause(ctx), err: ctxErr}
	}
	if viaDriver {
		s.rollback(ctx, tx)
	}
	return s.wrapWrite(op, lease, err)
}

// ErrStale is wrapped by ExecResource's error when the protected row already
// carries a higher fence than the caller's.
var ErrStale = errors.New("fence: resource already written by a newer fence")

// ExecResource runs a write on a row that keeps its own fence_token column,
// for a protected row that cannot join the lease table (another database,
// another service's schema). Each {{fence_token}} in query becomes a bound
// parameter carrying t's fence, so the statement can both store it and
// refuse a lower one:
//
//	n, err := fence.ExecResource(ctx, db, fence.MySQL, tok,
//		`UPDATE accounts SET balance = ?, fence_token = {{fence_token}}
//		 WHERE id = ? AND fence_token <= {{fence_token}}`, balance, id)
//
// Zero rows affected gives an error wrapping ErrStale and ErrLost (the row
// is missing or a newer fence has written it). Equal fences are accepted so a
// holder can write its row more than once.
func ExecResource(ctx context.Context, e Execer, d Dialect, t Token, query string, args ...any) (int64, error) {
	q, all, err := resourceSQL(d, t, query, args)
	if err != nil {
		return 0, err
	}
	res, err := e.ExecContext(ctx, q, all...)
	if err != nil {
		return 0, fmt.Errorf("fence: resource write of lease %q fence %d: %w", t.Lease, t.Fence, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, &StaleError{Lease: t.Lease, Fence: t.Fence}
	}
	return n, nil
}

// ResourceQuery returns query with each {{fence_token}} replaced by a bound
// parameter carrying t's fence (and ? rebound on PostgreSQL), and the full
// argument list, for a client other than database/sql; ExecResource runs it
// on an Execer.
func ResourceQuery(d Dialect, t Token, query string, args ...any) (string, []any, error) {
	return resourceSQL(d, t, query, args)
}

// resourceSQL puts t's fence where query says {{fence_token}}.
func resourceSQL(d Dialect, t Token, query string, args []any) (string, []any, error) {
	if err := validateToken(t); err != nil {
		return "", nil, err
	}
	return splice(d, query, args, TokenMarker, -1, func(first int) (string, []any) {
		if d == Postgres {
			return fmt.Sprintf("$%d::bigint", first), []any{t.Fence}
		}
		return "?", []any{t.Fence}
	})
}

// StaleError is returned by ExecResource when the row refused the fence.
type StaleError struct {
	Lease string
	Fence int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: lease %q fence %d is stale for this resource: it was written by a newer fence, or the row does not exist", e.Lease, e.Fence)
}

// Is makes errors.Is true for ErrStale and ErrLost.
func (e *StaleError) Is(target error) bool { return target == ErrStale || target == ErrLost }
