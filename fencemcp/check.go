package fencemcp

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/fencekit/fence"
)

//go:embed sql
var sqlFiles embed.FS

// Checker decides whether a verified claim is still the current epoch. The
// server middleware asks it before the tool runs, to refuse a stale call
// early; it is a check before an effect, not a fence: the tool's own writes
// must be fenced too (LeaseChecker.InTx, fence.ExecResource with
// Claim.Token, a downstream fencehttp service through Forward).
type Checker interface {
	Check(ctx context.Context, c Claim) error
}

// LeaseChecker checks claims against the lease rows of the fence store the
// holders acquire their epochs from: the MCP server shares that database.
type LeaseChecker struct {
	fs    *fence.Store
	check string
	lock  string
}

// NewLeaseChecker returns a LeaseChecker over fs, which must run on a
// database/sql handle (fs.DB() not nil).
func NewLeaseChecker(fs *fence.Store) (*LeaseChecker, error) {
	if fs == nil || fs.DB() == nil {
		return nil, fmt.Errorf("%w: fencemcp: NewLeaseChecker needs a fence.Store on a database/sql handle", fence.ErrInvalid)
	}
	b, err := sqlFiles.ReadFile("sql/" + string(fs.Dialect()) + "/lease_claim.sql")
	if err != nil {
		return nil, fmt.Errorf("%w: fencemcp: no lease query for dialect %q", fence.ErrInvalid, fs.Dialect())
	}
	q := strings.NewReplacer("{{prefix}}", fs.Prefix(), "{{now}}", fs.NowSQL()).Replace(string(b))
	lock := map[fence.Dialect]string{fence.Postgres: "FOR SHARE", fence.MySQL: "LOCK IN SHARE MODE"}[fs.Dialect()]
	return &LeaseChecker{
		fs:    fs,
		check: strings.ReplaceAll(q, "{{lock}}", ""),
		lock:  strings.ReplaceAll(q, "{{lock}}", lock),
	}, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Check reads the claim's lease row (without a lock) and refuses with
// ErrSuperseded unless the claim's fence and owner still hold it.
func (l *LeaseChecker) Check(ctx context.Context, c Claim) error {
	return l.verdict(ctx, l.fs.DB(), l.check, c)
}

// CheckTx is Check inside the caller's transaction, with the lease row
// share-locked until the transaction ends (on SQLite, the transaction's
// write lock does it): writes the transaction makes after CheckTx commit
// only while the claim's epoch is current, because a takeover, replan or
// cancel waits for the commit or is seen by the check.
func (l *LeaseChecker) CheckTx(ctx context.Context, tx *sql.Tx, c Claim) error {
	return l.verdict(ctx, tx, l.lock, c)
}

// InTx runs fn in a transaction of the fence store's database that first
// checks the claim with CheckTx; fn's writes commit only if the claim's
// epoch is still current at the commit. fn's error rolls back.
func (l *LeaseChecker) InTx(ctx context.Context, c Claim, fn func(tx *sql.Tx) error) error {
	tx, err := l.fs.DB().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%w: fencemcp: begin: %v", ErrUnavailable, err)
	}
	defer tx.Rollback() // after Commit, a no-op
	if err := l.CheckTx(ctx, tx, c); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fencemcp: commit of lease %q epoch %d step %q: the write may or may not have committed: %w", c.Lease, c.Fence, c.Step, err)
	}
	return nil
}

func (l *LeaseChecker) verdict(ctx context.Context, q querier, query string, c Claim) error {
	var owner, state string
	var current int64
	var valid int
	err := q.QueryRowContext(ctx, query, c.Lease).Scan(&owner, &current, &state, &valid)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return &SupersededError{Claim: c, Why: "the lease does not exist"}
	case err != nil:
		return fmt.Errorf("%w: lease %q: %v", ErrUnavailable, c.Lease, err)
	case current != c.Fence:
		return &SupersededError{Claim: c, Current: current, Why: fmt.Sprintf("the lease is at epoch %d", current)}
	case OwnerID(owner) != c.Owner:
		return &SupersededError{Claim: c, Current: current, Why: "epoch held by another owner (a restored database?)"}
	case state != "held":
		return &SupersededError{Claim: c, Current: current, Why: "the epoch was " + state}
	case valid == 0:
		return &SupersededError{Claim: c, Current: current, Why: "the epoch's lease expired by the database clock"}
	}
	return nil
}

// SupersededError is a refusal of a stale epoch. It wraps ErrSuperseded,
// fence.ErrLost and fence.ErrStale.
type SupersededError struct {
	Claim   Claim
	Current int64 // the lease's fence now, when known
	Why     string
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("fencemcp: superseded, do not retry: lease %q epoch %d step %q: %s", e.Claim.Lease, e.Claim.Fence, e.Claim.Step, e.Why)
}

// Is makes errors.Is true for ErrSuperseded, fence.ErrLost and fence.ErrStale.
func (e *SupersededError) Is(target error) bool {
	return target == ErrSuperseded || target == fence.ErrLost || target == fence.ErrStale
}
