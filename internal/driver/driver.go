// Package driver is the small interface that each database package (sqlite,
// postgres, mysql) implements. The root package fence builds its public API,
// its typed errors and its validation on top of it; a driver only runs SQL and
// reports what the database said.
//
// Every time is integer milliseconds since the Unix epoch read from the
// database clock (columns *_ms). A server database's drivers never use the
// Go clock for validity. The SQLite driver may, because there the database
// clock is this host's clock too (unixepoch() reads it): its refusal and
// is-held compare the stored expiry with the Go clock read after the row,
// which can only find a lease lapsed too early, never valid too long, and
// its renew and takeover bind a term counted from a Go clock read before
// the statement, which ends no later than one counted by the database.
//
// A lease row is valid ("held") exactly when leased_until_ms > database now.
// Release and revoke set leased_until_ms to 0, so a backwards step of the
// database clock can never make a released lease valid again; state is only a
// label ("held", "released", "revoked") for people and for error messages.
package driver

import (
	"context"
	"database/sql"
	"time"
)

// AfterWriter is implemented by an error that struck after a statement of
// the same call may have committed (a read-back after an autocommit write).
// Whatever it wraps — even database/sql's ErrBadConn, which otherwise means
// "nothing was sent" — the call's outcome is unknown.
type AfterWriter interface{ AfterWrite() bool }

// Lease states as stored in the state column.
const (
	StateHeld     = "held"
	StateReleased = "released"
	StateRevoked  = "revoked"
)

// Run statuses as stored in the runs table.
const (
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunLost      = "lost"
	RunAbandoned = "abandoned"
)

// Lease is a lease row as the database sees it.
type Lease struct {
	Name          string
	Owner         string // "" after a revoke
	Holder        string // the owner's name; "" after a revoke, or on a row from before schema v3
	Fence         int64
	State         string
	LeasedUntilMs int64 // 0 after release or revoke
	AcquiredAtMs  int64
	UpdatedAtMs   int64
	NowMs         int64 // database clock when the row was read
}

// TokenParams identifies one acquisition of a lease.
type TokenParams struct {
	Name  string
	Owner string
	Fence int64
}

// AcquireParams asks for a lease for TTLMs milliseconds of database time.
type AcquireParams struct {
	Name   string
	Owner  string
	Holder string // stored only by an acquisition that succeeds
	TTLMs  int64
}

// AcquireResult says whether the lease was taken. When Acquired is false and
// the driver could read the holder cheaply, Holder is set.
type AcquireResult struct {
	Acquired      bool
	Fence         int64
	LeasedUntilMs int64 // 0 if the dialect cannot return it in the same round trip
	NowMs         int64
	Holder        *Lease
}

// RaisedLease is a lease row as it was before LeaseRaiseFences moved its
// fence to NewFence and revoked it.
type RaisedLease struct {
	Lease
	NewFence int64
}

// RenewResult says whether the renewal matched a valid lease.
type RenewResult struct {
	Renewed       bool
	LeasedUntilMs int64
	NowMs         int64
}

// Run is a row of the run ledger.
type Run struct {
	ID           int64
	Lease        string
	Owner        string
	Holder       string // the lease row's holder when the run started; "" before schema v3
	Fence        int64
	Status       string
	StartedAtMs  int64
	FinishedAtMs int64  // 0 while running
	Result       string // JSON text or ""
	Error        string
	ExitCode     *int64
}

// StartRunParams records a run for a held token.
type StartRunParams struct {
	Token  TokenParams
	Detail string // optional JSON
}

// FinishRunParams completes a run with fenced completion.
type FinishRunParams struct {
	ID       int64
	Token    TokenParams
	Status   string // RunSucceeded or RunFailed
	Result   string
	Error    string
	ExitCode *int64
}

// RunFilter selects runs for listing, newest first.
type RunFilter struct {
	Lease  string
	Status string
	Limit  int
	// Before, when above 0, keeps runs whose ID is below it: the cursor of
	// the next page, newest first.
	Before int64
}

// LeaseFilter selects one page of leases, ordered by name.
type LeaseFilter struct {
	After string // only names after this one ("" from the start)
	Limit int    // 0: no limit
}

// TxGuard is an optional interface of a Driver on whose server GuardSQL's
// predicate does not fence a write by itself: MariaDB Galera certifies only
// the rows a transaction writes, so a share lock taken on one node never
// holds off a takeover committed through another (docs/adr/0006). When
// FencedWritesNeedTx reports true, the root runs every fenced write in a
// transaction that begins with LockTx, which on such a server writes the
// lease row under the token's condition: a takeover that got in first, on
// any node, then makes the transaction fail (a definite error, nothing
// committed) or match no row. The driver guards RunStart and RunFinish the
// same way itself. A driver without it, or reporting false, is used as
// before, with the same SQL.
type TxGuard interface {
	// FencedWritesNeedTx reports whether fenced writes must run in a
	// transaction that starts with LockTx. It may ask the server once.
	FencedWritesNeedTx(ctx context.Context) (bool, error)
}

// TopLocker is an optional interface of a Driver on whose server a row
// lock taken inside a savepoint ends with a rollback to it (PostgreSQL).
// LockTxTop is LockTx for a transaction the caller began (CheckTx): it
// fails, and InSubtransaction recognises the failure, when the transaction
// is inside a savepoint at the time. LockTx stays for the transactions the
// root begins itself, where nothing precedes the check.
type TopLocker interface {
	LockTxTop(ctx context.Context, tx *sql.Tx, t TokenParams) (bool, error)
	InSubtransaction(err error) bool
}

// StatementChecker is an optional interface of a Driver whose server runs
// every statement of a multi-statement text (SQLite's database/sql driver
// does). CheckOneStatement asks the server's own lexer whether q, the text
// about to be sent, is one statement (a trailing ; and comments allowed),
// so that a second statement cannot run without the fence even where
// fence's tokenizer would misread where the first one ends.
type StatementChecker interface {
	CheckOneStatement(q string) error
}

// ServerChecker is an optional interface of a Driver that identifies its
// server when the store opens (CheckSession reads the version).
// FencedSQLRefusal is non-nil when fence has not verified its reading of a
// caller's SQL against that server's lexer ({{fence}} statements are then
// refused, naming the server and what to use instead), or when the server
// was never identified.
type ServerChecker interface {
	FencedSQLRefusal() error
}

// TxCommitter is an optional interface of a Driver whose database/sql
// client sends COMMIT with no deadline: go-sql-driver/mysql's Tx.Commit
// has no context (its watcher covers BeginTx and each statement, not the
// COMMIT), so a server that stopped answering held a commit until TCP gave
// up. CommitTx commits tx, begun with ctx, within ctx; after it the
// transaction is over for the server, and tx is released or being
// released. A context error from it may come after the COMMIT was sent.
// RollbackTx is Tx.Rollback within ctx, for the same reason.
type TxCommitter interface {
	CommitTx(ctx context.Context, tx *sql.Tx) error
	RollbackTx(ctx context.Context, tx *sql.Tx) error
}

// Driver is implemented by each database package.
type Driver interface {
	// Dialect names the SQL dialect: "sqlite", "postgres" or "mysql".
	Dialect() string
	DB() *sql.DB

	// Migrate creates or upgrades the tables and returns the schema version.
	Migrate(ctx context.Context) (int, error)
	// SchemaVersion returns the applied version, 0 if none.
	SchemaVersion(ctx context.Context) (int, error)

	LeaseAcquire(ctx context.Context, p AcquireParams) (AcquireResult, error)
	LeaseRenew(ctx context.Context, t TokenParams, ttlMs int64) (RenewResult, error)
	// LeaseRenewBatch renews many tokens in few statements; the result has one
	// entry per token, in order.
	LeaseRenewBatch(ctx context.Context, ts []TokenParams, ttlMs int64) ([]RenewResult, error)
	LeaseRelease(ctx context.Context, t TokenParams) (bool, error)
	LeaseIsHeld(ctx context.Context, t TokenParams) (bool, error)
	LeaseGet(ctx context.Context, name string) (Lease, bool, error)
	// LeaseList returns the lease rows f selects ordered by name, and the
	// database now.
	LeaseList(ctx context.Context, f LeaseFilter) ([]Lease, int64, error)
	// LeaseRevoke bumps the fence of an existing lease and clears its owner
	// and holder.
	// ok is false when there is no such lease.
	LeaseRevoke(ctx context.Context, name string) (newFence int64, ok bool, err error)
	// LeaseRaiseFences sets the fence of every lease whose fence is below
	// floor to floor and revokes it, in one transaction; floor 0 means the
	// database clock in microseconds; a raised lease's owner and holder are
	// cleared, as a revoke clears them. It returns the floor used and the rows
	// as they were before, ordered by name.
	LeaseRaiseFences(ctx context.Context, floor int64) (used int64, raised []RaisedLease, err error)
	// Now returns the database clock.
	Now(ctx context.Context) (int64, error)

	// GuardSQL returns a boolean SQL predicate that is true only while the
	// token is valid, reading the lease row under a lock that serialises with a
	// takeover. first is the number of the first placeholder it may use (only
	// dialects with numbered placeholders care); args are the values for its
	// placeholders, in order.
	GuardSQL(t TokenParams, first int) (predicate string, args []any)
	// LockTx share-locks the lease row inside the caller's transaction and
	// reports whether the token is valid by the database clock. It takes a
	// transaction only: on a pool the lock would end with the statement. On a
	// TxGuard server it writes the lease row instead (see TxGuard).
	LockTx(ctx context.Context, tx *sql.Tx, t TokenParams) (bool, error)
	// Placeholder reports the dialect's placeholder style: "?" or "$".
	Placeholder() string
	// NowSQL is the database clock in integer milliseconds as an SQL
	// expression, for statements that stamp rows with database time.
	NowSQL() string

	// RunStart records a running run for a valid token, with the holder name
	// its lease row carries, and marks older
	// running runs of the same lease with lower fences abandoned, in one
	// transaction. ok is false when the token is not valid.
	RunStart(ctx context.Context, p StartRunParams) (id int64, ok bool, err error)
	// RunFinish is the fenced completion. ok is false when it changed nothing.
	RunFinish(ctx context.Context, p FinishRunParams) (bool, error)
	// RunMarkLost marks a still-running run lost.
	RunMarkLost(ctx context.Context, id, fence int64, reason string) (bool, error)
	// RunRefused ends an abandoned run of fence now (its worker reported
	// its end after a newer generation took over), once, adding "; "+report
	// to its error; ok is false when it changed nothing.
	RunRefused(ctx context.Context, id, fence int64, report string) (bool, error)
	// RunSweep marks running runs whose lease generation is no longer valid lost.
	RunSweep(ctx context.Context) (int64, error)
	// RunPrune deletes finished (not running) runs of lease ("" for all)
	// that finished more than olderThanMs ago by the database clock.
	RunPrune(ctx context.Context, lease string, olderThanMs int64) (int64, error)
	RunGet(ctx context.Context, id int64) (Run, bool, error)
	RunList(ctx context.Context, f RunFilter) ([]Run, error)

	// IsRetryable reports whether err is a transient database error (a lost
	// connection, a timeout, a serialization failure or deadlock) rather than an
	// answer. Zero-row results are never errors.
	IsRetryable(err error) bool
	// IsServerError reports whether err is the database's own answer that
	// the statement failed (so it did not commit), as opposed to a failure
	// between the client and the commit, whose outcome is unknown.
	IsServerError(err error) bool
	// DropTables removes the tables Migrate created (tests, uninstall).
	DropTables(ctx context.Context) error
}

// DefaultPrefix is the table prefix a driver constructor uses for "".
const DefaultPrefix = "fence_"

// Handle is a Driver as a database package hands it to fence.New: bound to
// one table prefix, able to check its session and to close what it opened.
type Handle interface {
	Driver
	// Prefix is the table prefix the driver's statements use.
	Prefix() string
	// WithPrefix returns a driver over the same connections with another
	// table prefix; it shares (and never closes) the original's handle.
	WithPrefix(prefix string) (Handle, error)
	// CheckSession verifies the settings fence relies on and returns a
	// *SettingError for a wrong one.
	CheckSession(ctx context.Context) error
	// LimitPool bounds the connection pool of a handle the driver opened
	// itself (OpenDriver); it leaves a caller's handle or pool alone.
	LimitPool(maxOpen int, maxLifetime, maxIdleTime time.Duration)
	// Close closes a handle the driver opened itself, and nothing else.
	Close() error
}

// BeforeWriter is implemented by an error of a call that had sent only
// reads when it struck (a read-first refusal): whatever it wraps, nothing
// was written, so the failure is definite.
type BeforeWriter interface{ BeforeWrite() bool }

// BeforeWrite marks err as struck before the call wrote anything (nil stays
// nil). Errors.Is and As see through it.
func BeforeWrite(err error) error {
	if err == nil {
		return nil
	}
	return beforeWriteError{err}
}

type beforeWriteError struct{ err error }

func (e beforeWriteError) Error() string     { return e.err.Error() }
func (e beforeWriteError) Unwrap() error     { return e.err }
func (e beforeWriteError) BeforeWrite() bool { return true }
