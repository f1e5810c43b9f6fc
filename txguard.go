package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// Fenced writes on a server where the {{fence}} predicate does not fence a
// write by itself: MariaDB Galera Cluster, which certifies only the rows a
// transaction writes, so the predicate's share lock on one node never holds
// off a takeover committed through another (docs/adr/0006-galera.md). There
// each fenced write is a transaction: LockTx, which on such a server writes
// the lease row under the token's condition, then the caller's statement
// (predicate included), then COMMIT. A takeover ordered first, through any
// node, makes the transaction match no lease row or fail certification
// (error 1213, a definite refusal: nothing committed).

// guardConflictRetries bounds how often Exec runs its own transaction again
// after a certification conflict while the lease is still held (a renewal
// or another fenced write of the same lease committed through another node
// in between).
const guardConflictRetries = 4

// needsTx reports whether the store's driver needs fenced writes in a
// transaction (driver.TxGuard).
func (s *Store) needsTx(ctx context.Context) (bool, error) {
	g, ok := s.drv.(driver.TxGuard)
	if !ok {
		return false, nil
	}
	return g.FencedWritesNeedTx(ctx)
}

// execGuarded is ExecIn on such a server: q and args already carry the
// predicate. A *sql.Tx is the caller's transaction: the guard and the
// statement join it and the caller commits. On a *sql.DB or *sql.Conn the
// write gets a transaction of its own.
func (s *Store) execGuarded(ctx context.Context, e Execer, t Token, q string, args []any) (int64, error) {
	var begin func(context.Context) (*sql.Tx, error)
	switch h := e.(type) {
	case *sql.Tx:
		return s.guardedStmt(ctx, h, t, q, args)
	case *sql.DB:
		begin = func(ctx context.Context) (*sql.Tx, error) { return h.BeginTx(ctx, nil) }
	case *sql.Conn:
		begin = func(ctx context.Context) (*sql.Tx, error) { return h.BeginTx(ctx, nil) }
	default:
		return 0, fmt.Errorf("%w: on MariaDB Galera a fenced write must run in a transaction that first writes the lease row; "+
			"pass ExecIn a *sql.DB, *sql.Conn or *sql.Tx, not %T", ErrInvalid, e)
	}
	for attempt := 1; ; attempt++ {
		n, err := s.guardedTx(ctx, begin, t, q, args)
		if err == nil || attempt == guardConflictRetries || !s.conflict(err) {
			return n, s.explainConflict(ctx, t, "write", err)
		}
		if ok, herr := s.stillHeld(ctx, t); herr != nil || !ok {
			return n, s.explainConflict(ctx, t, "write", err)
		}
		// Jitter, so that two writers of the lease do not meet again.
		timer := time.NewTimer(time.Duration(rand.Int64N(int64(attempt)*int64(2*time.Millisecond))) + time.Millisecond)
		select {
		case <-ctx.Done():
			timer.Stop()
			return n, err
		case <-timer.C:
		}
	}
}

// guardedTx runs the guard and the statement in a transaction of their own.
func (s *Store) guardedTx(ctx context.Context, begin func(context.Context) (*sql.Tx, error), t Token, q string, args []any) (int64, error) {
	tx, err := begin(ctx)
	if err != nil {
		return 0, s.wrap("begin", t.Lease, err)
	}
	n, err := s.guardedStmt(ctx, tx, t, q, args)
	if err != nil {
		s.rollback(ctx, tx)
		return 0, err
	}
	if err := s.commit(ctx, tx, "commit of fenced write", t.Lease); err != nil {
		return 0, err
	}
	return n, nil
}

// guardedStmt runs the guard, then the caller's statement, in tx.
func (s *Store) guardedStmt(ctx context.Context, tx *sql.Tx, t Token, q string, args []any) (int64, error) {
	ok, err := s.drv.LockTx(ctx, tx, tp(t))
	if err != nil {
		return 0, s.wrapWrite("fenced write", t.Lease, err)
	}
	if !ok {
		return 0, s.lost(ctx, t, "write")
	}
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, s.wrapWrite("fenced write", t.Lease, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, s.wrap("fenced write", t.Lease, err)
	}
	if n == 0 {
		// The predicate's clock is the statement's start, a little later
		// than the guard's: the lease may have lapsed in between.
		return 0, s.noRows(ctx, t, "write")
	}
	return n, nil
}

// conflict reports whether err is a definite, transient refusal: on Galera a
// certification failure or a brute-force abort (1213), nothing committed.
func (s *Store) conflict(err error) bool {
	var de *dbError
	return errors.As(err, &de) && de.retryable && s.definite(de.err)
}

// stillHeld reads whether t holds its lease, within the caller's deadline.
func (s *Store) stillHeld(ctx context.Context, t Token) (bool, error) {
	rctx, cancel := followUp(ctx)
	defer cancel()
	return s.drv.LeaseIsHeld(rctx, tp(t))
}

// explainConflict turns a conflict into ErrLost when the lease is no longer
// held, and leaves it a retryable error (IsRetryable) when it still is.
// Other errors pass through.
func (s *Store) explainConflict(ctx context.Context, t Token, op string, err error) error {
	if err == nil || !s.conflict(err) {
		return err
	}
	if ok, herr := s.stillHeld(ctx, t); herr == nil && !ok {
		return s.lost(ctx, t, op)
	}
	return err
}
