// Package fencepgx is fence's fenced writes for pgx's own API, for programs
// that use pgx directly and no database/sql. The store itself comes from
// the postgres package's driver over the program's pool:
//
//	drv, err := postgres.NewPool(pool, "")
//	store, err := fence.New(ctx, drv)
//	n, err := fencepgx.Exec(ctx, store, pool, tok,
//		`UPDATE reports SET body = $1 WHERE id = $2 AND {{fence}}`, body, id)
//
// Everything on fence.Store works the same on such a store (leases, runs,
// the runner, AcquireWait's LISTEN); this package adds what takes pgx's
// types: a fenced write on a pgx.Tx, *pgx.Conn or *pgxpool.Pool, a fenced
// pgx transaction, and a resource write.
package fencepgx

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/keep"
)

// Execer is what a fenced write runs on: pgx.Tx, *pgx.Conn, *pgxpool.Pool
// and *pgxpool.Conn all have this method.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Beginner starts a transaction: *pgxpool.Pool, *pgxpool.Conn and *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Exec is fence.Store.ExecIn for pgx: it runs the caller's UPDATE, DELETE
// or INSERT … SELECT on e with the fence predicate where query says
// {{fence}}, and gives the same results: the rows affected, or an error
// wrapping fence.ErrLost or fence.ErrNoMatch when nothing changed. It works
// on any PostgreSQL store, also one over database/sql, when the program
// writes through pgx elsewhere.
func Exec(ctx context.Context, s *fence.Store, e Execer, t fence.Token, query string, args ...any) (int64, error) {
	if err := postgresOnly(s, "Exec"); err != nil {
		return 0, err
	}
	if e == nil {
		return 0, fmt.Errorf("%w: fencepgx.Exec needs a pgx.Tx, *pgx.Conn or *pgxpool.Pool, got nil", fence.ErrInvalid)
	}
	return s.ExecWith(ctx, t, func(ctx context.Context, q string, all []any) (int64, error) {
		tag, err := e.Exec(ctx, q, all...)
		return tag.RowsAffected(), err
	}, query, args...)
}

// InTx is fence.Store.InTx for pgx: fn runs in a transaction begun on b
// that first share-locks the lease row and verifies t by the database
// clock, so a takeover cannot commit between the check and fn's writes. If
// t no longer holds the lease, fn is not called and the error wraps
// fence.ErrLost. fn's error rolls back. A COMMIT whose answer was lost is
// reported as fence.ErrAmbiguous: it may have committed. A COMMIT the
// server answered with ROLLBACK (fn went on after a failed statement) is
// pgx.ErrTxCommitRollback, as pgx reports it: nothing was committed.
//
// On a *pgxpool.Pool, *pgxpool.Conn or *pgx.Conn the BEGIN and the check
// go to the server in one round trip, as one pgx.Batch (pgx's
// Batch.BeginTx), and fn gets the transaction pgx began there: the same
// pgx.Tx as from b.Begin, with its savepoints, large objects and the rest.
// A pool's connection stays acquired until the commit or rollback, as with
// Begin. Any other Beginner is begun with b.Begin, and checked in a second
// round trip.
func InTx(ctx context.Context, s *fence.Store, b Beginner, t fence.Token, fn func(tx pgx.Tx) error) error {
	if err := postgresOnly(s, "InTx"); err != nil {
		return err
	}
	bs, err := batchBeginner(b)
	if err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	if err := notSent(ctx, "begin", t); err != nil {
		return err
	}
	var tx pgx.Tx
	if bs != nil {
		tx, err = beginChecked(ctx, s, bs, t)
		if err != nil {
			return err
		}
	} else {
		tx, err = b.Begin(ctx)
		if err != nil {
			return fmt.Errorf("fence: begin for lease %q: %w", t.Lease, err)
		}
		if err := CheckTx(ctx, s, tx, t); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := notSent(ctx, "commit", t); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return commitError(ctx, t, err)
	}
	return nil
}

// notSent is fence's refusal of a call whose context has ended (a Run
// job's context as soon as its renew deadline passed, before the
// runner's timer cancels it): nothing is sent, the error is definite and
// wraps the context's cause (ErrLost for a job whose lease was lost) and
// its error.
func notSent(ctx context.Context, op string, t fence.Token) error {
	if k, ok := keep.FromContext(ctx); ok {
		k.Check()
	}
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != err {
		return fmt.Errorf("fence: %s of lease %q not sent, its context had ended: %w (%w)", op, t.Lease, cause, err)
	}
	return fmt.Errorf("fence: %s of lease %q not sent, its context had ended: %w", op, t.Lease, err)
}

// Every rollback here runs within ctx: pgx's Rollback has no deadline of
// its own, and on a server that stopped answering one under
// context.WithoutCancel(ctx) waited for TCP to give up. Once ctx has
// ended, pgx does not send it and closes the connection instead, which
// ends the transaction on the server.

// batchSender is what InTx sends its BEGIN and check on: *pgxpool.Pool,
// *pgxpool.Conn and *pgx.Conn.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// batchBeginner returns b as a batchSender when it is one of the types whose
// SendBatch begins a transaction for Batch.BeginTx, nil for any other
// Beginner (a pgx.Tx among them: its SendBatch refuses Batch.BeginTx, and
// its Begin is a savepoint, which CheckTx refuses), and an error for nil.
func batchBeginner(b Beginner) (batchSender, error) {
	nilErr := fmt.Errorf("%w: fencepgx.InTx needs a *pgxpool.Pool or *pgx.Conn to begin on, got nil", fence.ErrInvalid)
	switch v := b.(type) {
	case nil:
		return nil, nilErr
	case *pgxpool.Pool:
		if v == nil {
			return nil, nilErr
		}
		return v, nil
	case *pgxpool.Conn:
		if v == nil {
			return nil, nilErr
		}
		return v, nil
	case *pgx.Conn:
		if v == nil {
			return nil, nilErr
		}
		return v, nil
	}
	return nil, nil
}

// beginChecked sends BEGIN and the lease check (CheckTx's query, with its
// bound parameters) in one batch, and returns the transaction if t holds
// the lease. Otherwise the transaction is rolled back, so that a pooled
// connection goes back idle, and the error is CheckTx's (wrapping
// fence.ErrLost for a refusal), or a begin error as b.Begin's would be.
func beginChecked(ctx context.Context, s *fence.Store, bs batchSender, t fence.Token) (pgx.Tx, error) {
	var tx pgx.Tx
	var beginErr error
	// BEGIN is in the same batch, so the check runs at the transaction's
	// top level by construction: the plain statement, not CheckWith's,
	// which also tests for a savepoint (and costs a snapshot export).
	fresh, ok := s.Driver().(interface {
		LockSQLFresh(driver.TokenParams) (string, []any)
	})
	err := s.CheckWith(ctx, t, func(ctx context.Context, q string, args []any) (bool, error) {
		if ok {
			q, args = fresh.LockSQLFresh(driver.TokenParams{Name: t.Lease, Owner: t.Owner, Fence: t.Fence})
		}
		var b pgx.Batch
		b.BeginTx(pgx.TxOptions{})
		b.Queue(q, args...)
		br := bs.SendBatch(ctx, &b)
		tx = br.Tx()
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			beginErr = err
			return false, err
		}
		var held bool
		err := br.QueryRow().Scan(&held)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return held, err
	})
	if err == nil {
		return tx, nil
	}
	if tx != nil {
		// Also after a failed BEGIN: pgx has then closed tx, and its
		// Rollback only gives a pooled connection back.
		_ = tx.Rollback(ctx)
	}
	if beginErr != nil {
		return nil, fmt.Errorf("fence: begin for lease %q: %w", t.Lease, beginErr)
	}
	return nil, err
}

// commitError classifies a failed COMMIT: the server's own answer (a
// serialization failure, a deferred constraint, or ROLLBACK for a
// transaction a failed statement had aborted, pgx.ErrTxCommitRollback) or a
// request pgx knows it never sent rolled back; anything else may have
// committed.
func commitError(ctx context.Context, t fence.Token, err error) error {
	var pe *pgconn.PgError
	if pgconn.SafeToRetry(err) && ctx.Err() != nil {
		// ctx ended after the check before Commit: pgx did not send it
		// (and closed the connection, which rolls the transaction back).
		return notSent(ctx, "commit", t)
	}
	if errors.As(err, &pe) || errors.Is(err, pgx.ErrTxCommitRollback) || pgconn.SafeToRetry(err) {
		return fmt.Errorf("fence: commit of lease %q fence %d: %w", t.Lease, t.Fence, err)
	}
	return &fence.AmbiguousError{Op: "commit", Lease: t.Lease, Err: err}
}

// CheckTx is fence.Store.CheckTx for a pgx transaction: it share-locks the
// lease row inside tx and verifies t by the database clock. Call it before
// the transaction's writes; they are then fenced until commit.
//
// tx must be a top-level transaction (from Begin on a pool or connection).
// A nested one, from tx.Begin, is a SAVEPOINT: its rollback would release
// the share lock and let a takeover commit before the outer transaction's
// writes, so CheckTx refuses it with fence.ErrInvalid.
func CheckTx(ctx context.Context, s *fence.Store, tx pgx.Tx, t fence.Token) error {
	if err := postgresOnly(s, "CheckTx"); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("%w: fencepgx.CheckTx needs the caller's pgx.Tx, got nil", fence.ErrInvalid)
	}
	if isSavepoint(tx) {
		return fmt.Errorf("%w: fencepgx.CheckTx got a nested pgx transaction (a SAVEPOINT): rolling it back would release the lease lock while the outer transaction goes on; call CheckTx on the outer transaction, or fence each write with Exec and {{fence}}", fence.ErrInvalid)
	}
	return s.CheckWith(ctx, t, func(ctx context.Context, q string, args []any) (bool, error) {
		var held bool
		err := tx.QueryRow(ctx, q, args...).Scan(&held)
		return held, err
	})
}

// isSavepoint reports whether tx is pgx's simulated nested transaction,
// which pgx implements with SAVEPOINT. pgx does not export the type, so it
// is known by name; pgxpool's Tx wraps only top-level transactions.
func isSavepoint(tx pgx.Tx) bool {
	return reflect.TypeOf(tx).String() == "*pgx.dbSimulatedNestedTx"
}

// ExecResource is fence.ExecResource for pgx: each {{fence_token}} in query
// becomes a bound parameter carrying t's fence, and zero rows affected
// gives an error wrapping fence.ErrStale and fence.ErrLost.
func ExecResource(ctx context.Context, e Execer, t fence.Token, query string, args ...any) (int64, error) {
	q, all, err := fence.ResourceQuery(fence.Postgres, t, query, args...)
	if err != nil {
		return 0, err
	}
	tag, err := e.Exec(ctx, q, all...)
	if err != nil {
		return 0, fmt.Errorf("fence: resource write of lease %q fence %d: %w", t.Lease, t.Fence, err)
	}
	if tag.RowsAffected() == 0 {
		return 0, &fence.StaleError{Lease: t.Lease, Fence: t.Fence}
	}
	return tag.RowsAffected(), nil
}

func postgresOnly(s *fence.Store, fn string) error {
	if s == nil {
		return fmt.Errorf("%w: fencepgx.%s needs a store, got nil", fence.ErrInvalid, fn)
	}
	if s.Dialect() != fence.Postgres {
		return fmt.Errorf("%w: fencepgx.%s needs a PostgreSQL store, this one is %s", fence.ErrInvalid, fn, s.Dialect())
	}
	return nil
}
