package fence

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/keep"
)

// Dialect names a supported database.
type Dialect string

// Supported dialects. MySQL covers MySQL 8.0 and MariaDB 10.6+.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql"
)

// Store is a lease store over one database. It is safe for concurrent use.
type Store struct {
	drv     driver.Driver
	h       driver.Handle // drv, for Close
	db      *sql.DB       // nil for a driver over a pgx pool (postgres.NewPool)
	dialect Dialect
	prefix  string
	// prefixSet is whether WithPrefix was given: it overrides the driver's.
	prefixSet bool
	log       *slog.Logger
	clock     Clock
	wait      waitConfig
	maxOpen   int // the pool bound of a driver's own handle (WithMaxOpenConns)
	holder    string
	named     bool // WithHolder was given

	observers []Observer
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the table prefix (default "fence_"). It must match
// ^[A-Za-z_][A-Za-z0-9_]{0,40}$.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix, s.prefixSet = p, true } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// WithClock replaces the local clock. It is used only for local waiting and
// giving up early, never to decide whether a lease is valid; tests use it to
// prove that a skewed application clock changes no outcome.
func WithClock(c Clock) Option { return func(s *Store) { s.clock = c } }

// WithWaitBackoff sets how AcquireWait polls a held lease: it sleeps until the
// holder's expiry as the database reported it, but never longer than max, and
// backs off from min between failed attempts, with jitter (defaults 25ms, 2s).
func WithWaitBackoff(min, max time.Duration) Option {
	return func(s *Store) { s.wait = waitConfig{min: min, max: max} }
}

type waitConfig struct{ min, max time.Duration }

// WithMaxOpenConns bounds the connection pool of a driver made by
// OpenDriver (and so of fencedsn.Open)
// (default 10, with as many kept idle, each connection replaced after 30
// minutes and closed after 5 idle). Ten is enough for fence's own work —
// each lease operation is one short statement, and a Run uses at most two
// connections at a time (renewal and run ledger) besides the job's writes —
// and it keeps ten processes within PostgreSQL's default max_connections of
// 100. Without a bound, a burst of goroutines opens a connection each until
// the server refuses more (60 concurrent acquires against
// max_connections=20 failed 36); with one they queue for a connection.
// A caller's own handle or pgx pool is left as it is. A SQLite
// "sqlite::memory:" store always has one connection.
func WithMaxOpenConns(n int) Option { return func(s *Store) { s.maxOpen = n } }

// WithHolder names the owner of every lease this store acquires (default
// the host name and process id, "host:pid", or "pid:N" when the host name
// cannot be read). The name is stored with each acquisition and each run,
// and shown by Get and List (LeaseInfo.Holder), in HeldError, by `fence
// leases` and `fence runs` and on the operations page, so that people can
// tell who holds a lease. It is 1 to 255 bytes of printable UTF-8
// (ValidateHolder); a bad name makes New fail with
// ErrInvalid.
//
// A holder name is a label, not a secret and not a proof: several stores
// may use the same name, and only the owner token (Token.Owner) of an
// acquisition can renew, release or write under it.
func WithHolder(name string) Option {
	return func(s *Store) { s.holder, s.named = name, true }
}

// defaultHolder is host:pid.
func defaultHolder() string {
	pid := strconv.Itoa(os.Getpid())
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "pid:" + pid
	}
	if h := host + ":" + pid; ValidateHolder(h) == nil {
		return h
	}
	return "pid:" + pid
}

// Pool defaults of a driver's own handle (see WithMaxOpenConns).
const (
	defaultMaxOpenConns    = 10
	defaultConnMaxLifetime = 30 * time.Minute
	defaultConnMaxIdleTime = 5 * time.Minute
)

// checkTimeout bounds New's check of the handle within the caller's ctx.
const checkTimeout = 30 * time.Second

// Driver is a database package's driver for one database and table
// prefix: postgres.New, postgres.NewPool, mysql.New or sqlite.New over a
// handle the caller keeps, or their OpenDriver over one the store owns.
// Importing a driver's package is what links its database client: a
// program that never imports fence/sqlite carries no SQLite.
type Driver interface{ driver.Handle }

// New returns a store over a driver:
//
//	db, err := postgres.Open(dsn) // or the caller's own *sql.DB
//	drv, err := postgres.New(db, "")
//	store, err := fence.New(ctx, drv)
//
// It connects once (within ctx and at most 30 s) to check the settings
// fence relies on, and refuses a handle that would break them with an
// error wrapping ErrInvalid that names the setting and the fix: on MySQL
// autocommit=0, READ UNCOMMITTED, a read-only session, or a handle without
// clientFoundRows (checked on a TEMPORARY table); on PostgreSQL a standby,
// a read-only default, a default isolation other than READ COMMITTED, or
// synchronous_commit=off; on SQLite journal_mode OFF (or MEMORY on a file)
// or synchronous below FULL on a file. Handles from each package's Open
// pass. An unreachable database gives an error wrapping ErrUnavailable.
//
// WithPrefix, when given, overrides the driver's prefix. A driver made by
// OpenDriver owns its handle: New bounds its pool (WithMaxOpenConns) and
// the store's Close closes it. A caller's handle or pool is left as it is.
// fencedsn.Open does all of this from a DSN.
//
// From New on, the store runs every call on d and its handle: do not call
// d.Close, and do not close the *sql.DB or pgx pool d was made over, while
// the store is in use — every later call of the store then fails ("sql:
// database is closed"). Close the store instead; it closes what OpenDriver
// opened, and a handle of your own is yours to close after it.
func New(ctx context.Context, d Driver, opts ...Option) (*Store, error) {
	if d == nil || reflect.ValueOf(d).IsNil() {
		return nil, fmt.Errorf("%w: nil driver (want postgres.New, mysql.New or sqlite.New)", ErrInvalid)
	}
	s, err := newStore(Dialect(d.Dialect()), opts)
	if err != nil {
		return nil, err
	}
	var h driver.Handle = d
	if s.prefixSet && s.prefix != h.Prefix() {
		if h, err = h.WithPrefix(s.prefix); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	s.prefix = h.Prefix()
	h.LimitPool(s.maxOpen, defaultConnMaxLifetime, defaultConnMaxIdleTime)
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if err := checkSession(ctx, h.CheckSession); err != nil {
		return nil, err
	}
	s.drv, s.h, s.db = h, h, h.DB()
	return s, nil
}

// checkSession runs a driver's settings check: a wrong setting is
// ErrInvalid, anything else (no connection) ErrUnavailable.
func checkSession(ctx context.Context, check func(context.Context) error) error {
	err := check(ctx)
	var se *driver.SettingError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	default:
		return fmt.Errorf("%w: checking the connection's settings: %v", ErrUnavailable, err)
	}
}

// newStore applies and validates the options common to every handle.
func newStore(dialect Dialect, opts []Option) (*Store, error) {
	s := &Store{
		dialect: dialect,
		prefix:  DefaultPrefix,
		log:     slog.New(slog.DiscardHandler),
		clock:   systemClock{},
		wait:    waitConfig{min: 25 * time.Millisecond, max: 2 * time.Second},
		maxOpen: defaultMaxOpenConns,
	}
	for _, o := range opts {
		o(s)
	}
	if err := ValidatePrefix(s.prefix); err != nil {
		return nil, err
	}
	if s.wait.min <= 0 || s.wait.max < s.wait.min {
		return nil, fmt.Errorf("%w: wait backoff min %v max %v", ErrInvalid, s.wait.min, s.wait.max)
	}
	if s.maxOpen < 1 {
		return nil, fmt.Errorf("%w: WithMaxOpenConns(%d): want at least 1", ErrInvalid, s.maxOpen)
	}
	if !s.named {
		s.holder = defaultHolder()
	}
	if err := ValidateHolder(s.holder); err != nil {
		return nil, fmt.Errorf("WithHolder: %w", err)
	}
	return s, nil
}

// Dialect returns the store's database dialect.
func (s *Store) Dialect() Dialect { return s.dialect }

// Prefix returns the table prefix.
func (s *Store) Prefix() string { return s.prefix }

// Holder returns the name this store's acquisitions are recorded under
// (WithHolder).
func (s *Store) Holder() string { return s.holder }

// Driver returns the driver the store runs on (after WithPrefix), for
// packages that reach the same handle another way (fencepgx, task).
func (s *Store) Driver() Driver { return s.h }

// DB returns the underlying database/sql handle, for the caller's own fenced
// writes. It is nil for a driver over a pgx pool (postgres.NewPool).
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database handle if the driver opened it (OpenDriver,
// fencedsn.Open); a caller's own handle or pool stays open.
func (s *Store) Close() error { return s.h.Close() }

// Migrate creates or upgrades fence's tables — leases, runs, schema, and the
// task package's tasks and task_steps — and returns the schema version.
// It is idempotent and safe to run from several processes at once.
func (s *Store) Migrate(ctx context.Context) (int, error) {
	v, err := s.drv.Migrate(ctx)
	if err != nil {
		return 0, s.wrap("migrate", "", err)
	}
	return v, nil
}

// DropTables removes every table Migrate created, data included. For tests
// and uninstalling; there is no undo.
func (s *Store) DropTables(ctx context.Context) error {
	if err := s.drv.DropTables(ctx); err != nil {
		return s.wrap("drop tables", "", err)
	}
	return nil
}

// SchemaVersion returns the applied schema version (0 before Migrate).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	v, err := s.drv.SchemaVersion(ctx)
	if err != nil {
		return 0, s.wrap("schema version", "", err)
	}
	return v, nil
}

// Lease is a successful acquisition.
type Lease struct {
	Token Token
	TTL   time.Duration
	// ExpiresAt is when the lease lapses by the database clock, or zero where
	// the dialect does not report it in the same round trip (MySQL).
	ExpiresAt time.Time

	// began is the local monotonic time from before the call that committed
	// this generation (or earlier): the runner's renew deadline counts from
	// it, so a wait before that call is not charged to the job.
	began time.Time
}

// Acquire takes the lease if it is absent, released or expired by the
// database clock; every success returns a fence greater than any before it for
// that name. If another owner holds it, the error wraps ErrHeld (*HeldError).
func (s *Store) Acquire(ctx context.Context, name string, ttl time.Duration) (l Lease, err error) {
	return s.acquireAs(ctx, name, ttl, "")
}

// acquireAs is Acquire under a given owner token ("": a new one). The
// observer sees each call, so AcquireWait's attempts are counted one by one.
func (s *Store) acquireAs(ctx context.Context, name string, ttl time.Duration, owner string) (l Lease, err error) {
	ctx, done := s.observe(ctx, OpAcquire, name)
	defer func() { done(Event{Fence: l.Token.Fence, Err: err, ExpiresIn: okTTL(err, ttl)}) }()
	return s.acquire(ctx, name, ttl, owner)
}

func (s *Store) acquire(ctx context.Context, name string, ttl time.Duration, owner string) (Lease, error) {
	if err := ValidateName(name); err != nil {
		return Lease{}, err
	}
	if err := ValidateTTL(ttl); err != nil {
		return Lease{}, err
	}
	if owner == "" {
		var err error
		if owner, err = newOwner(); err != nil {
			return Lease{}, err
		}
	}
	if err := notSent(ctx, "acquire", name); err != nil {
		return Lease{}, err
	}
	began := time.Now()
	r, err := s.drv.LeaseAcquire(ctx, driver.AcquireParams{Name: name, Owner: owner, Holder: s.holder, TTLMs: ttlMillis(ttl)})
	if err != nil {
		return s.resolveAcquire(ctx, name, owner, ttl, began, s.wrapWrite("acquire", name, err))
	}
	if !r.Acquired {
		h := &HeldError{Lease: name}
		if r.Holder == nil {
			l, ok, err := s.drv.LeaseGet(ctx, name)
			if err == nil && ok {
				r.Holder = &l
			}
		}
		if r.Holder != nil {
			if r.Holder.Owner == owner && r.Holder.LeasedUntilMs > r.Holder.NowMs {
				// Only this owner's earlier attempt (AcquireWait's, whose
				// answer a failed connection lost) can have written it.
				s.log.InfoContext(ctx, "fence: acquire outcome resolved: an earlier attempt committed", "lease", name, "fence", r.Holder.Fence)
				return adopted(name, owner, ttl, began, *r.Holder), nil
			}
			h.Fence, h.Holder = r.Holder.Fence, r.Holder.Holder
			h.Remaining = time.Duration(max(r.Holder.LeasedUntilMs-r.Holder.NowMs, 0)) * time.Millisecond
		}
		return Lease{}, h
	}
	l := Lease{Token: Token{Lease: name, Owner: owner, Fence: r.Fence}, TTL: ttl, began: began}
	if r.LeasedUntilMs > 0 {
		l.ExpiresAt = time.UnixMilli(r.LeasedUntilMs)
	}
	s.log.DebugContext(ctx, "fence: acquired", "lease", name, "fence", r.Fence)
	return l, nil
}

// resolveAcquire settles an acquire whose outcome is unknown (the connection
// failed before the answer) by reading the row: the owner token is ours alone,
// so if the row carries it and is valid, the acquire committed and the lease
// is ours. Otherwise the outcome stays unknown: the acquire may have failed,
// or committed and already been superseded, and only the first is "not
// acquired". Either way the caller does not hold the lease.
func (s *Store) resolveAcquire(ctx context.Context, name, owner string, ttl time.Duration, began time.Time, err error) (Lease, error) {
	if !errors.Is(err, ErrAmbiguous) {
		return Lease{}, err
	}
	rctx, cancel := followUp(ctx)
	defer cancel()
	l, ok, gerr := s.drv.LeaseGet(rctx, name)
	if gerr == nil && ok && l.Owner == owner && l.LeasedUntilMs > l.NowMs {
		s.log.InfoContext(ctx, "fence: acquire outcome resolved: committed", "lease", name, "fence", l.Fence)
		return adopted(name, owner, ttl, began, l), nil
	}
	return Lease{}, err
}

// adopted is the Lease for a generation of ours found by a read (an attempt
// whose answer was lost committed it). Its commit time is unknown, so began
// is set back by the part of the TTL already used by the database's account:
// the lease lapses no sooner than read+remaining, i.e. began+ttl.
func adopted(name, owner string, ttl time.Duration, readBegan time.Time, l driver.Lease) Lease {
	remaining := time.Duration(max(l.LeasedUntilMs-l.NowMs, 0)) * time.Millisecond
	return Lease{
		Token:     Token{Lease: name, Owner: owner, Fence: l.Fence},
		TTL:       ttl,
		ExpiresAt: time.UnixMilli(l.LeasedUntilMs),
		began:     readBegan.Add(min(remaining-ttl, 0)),
	}
}

// AcquireWait acquires the lease, waiting while another owner holds it: it
// sleeps until the holder's expiry as the database reported it (capped by the
// wait backoff, so a release is noticed), with jitter of at most the wait
// backoff's minimum, and on PostgreSQL it is woken as soon as another process
// releases the lease (LISTEN/NOTIFY; see handoff.go). It retries transient
// database errors with backoff. It returns when acquired, on an error that is
// not ErrHeld or transient, or when ctx ends (the error then wraps ctx's
// error, the last attempt's error and, if that was not ErrHeld, the last
// ErrHeld seen: an attempt cut short by the deadline still says who held it).
//
// Every attempt of one call uses the same owner token, so a generation an
// attempt committed although its answer was lost (the connection failed) is
// recognised by the next attempt and returned, instead of being waited out
// as another owner's for up to a TTL.
func (s *Store) AcquireWait(ctx context.Context, name string, ttl time.Duration) (Lease, error) {
	owner, err := newOwner()
	if err != nil {
		return Lease{}, err
	}
	backoff := s.wait.min
	var h handoff // wakes the wait at a release (handoff.go)
	defer func() { h.close() }()
	watched := false
	var lastHeld error
	for {
		l, err := s.acquireAs(ctx, name, ttl, owner)
		if err == nil {
			return l, nil
		}
		var held *HeldError
		var sleep time.Duration
		switch {
		case errors.As(err, &held):
			lastHeld = err
			if !watched {
				watched = true
				var ok bool
				if h, ok = s.watch(ctx, name); ok {
					continue // try again now: a release before the watch began is not announced
				}
			}
			// Until the reported expiry (+1ms: the database counts whole
			// milliseconds), so a lapsed holder is taken over promptly.
			sleep = min(held.Remaining+time.Millisecond, s.wait.max)
			backoff = s.wait.min
		case IsRetryable(err):
			sleep = backoff
			backoff = min(backoff*2, s.wait.max)
		case ctx.Err() != nil:
			// The deadline cut the attempt short (or it was not sent): the
			// last ErrHeld is still the answer the caller waited for.
			return Lease{}, s.gaveUp(ctx, name, err, lastHeld)
		default:
			return Lease{}, err
		}
		sleep += waitJitter(sleep, s.wait.min)
		if serr := h.sleep(ctx, s.clock, sleep); serr != nil {
			return Lease{}, s.gaveUp(ctx, name, err, lastHeld)
		}
	}
}

// gaveUp is AcquireWait's error when ctx ended: the cause, the last
// attempt's error and, if that was not ErrHeld, the last ErrHeld seen.
func (s *Store) gaveUp(ctx context.Context, name string, last, lastHeld error) error {
	if lastHeld != nil && lastHeld != last {
		return fmt.Errorf("fence: gave up waiting for lease %q: %w; last attempt: %w; before it: %w", name, context.Cause(ctx), last, lastHeld)
	}
	return fmt.Errorf("fence: gave up waiting for lease %q: %w; last attempt: %w", name, context.Cause(ctx), last)
}

// Renew extends a held lease to ttl from the database's now. If the token no
// longer holds the lease the error wraps ErrLost; that is final, never a
// reason to retry.
func (s *Store) Renew(ctx context.Context, t Token, ttl time.Duration) (until time.Time, err error) {
	ctx, done := s.observe(ctx, OpRenew, t.Lease)
	defer func() { done(Event{Fence: t.Fence, Err: err, ExpiresIn: okTTL(err, ttl)}) }()
	return s.renew(ctx, t, ttl)
}

func (s *Store) renew(ctx context.Context, t Token, ttl time.Duration) (time.Time, error) {
	if err := validateToken(t); err != nil {
		return time.Time{}, err
	}
	if err := ValidateTTL(ttl); err != nil {
		return time.Time{}, err
	}
	if err := notSent(ctx, "renew", t.Lease); err != nil {
		return time.Time{}, err
	}
	r, err := s.drv.LeaseRenew(ctx, tp(t), ttlMillis(ttl))
	if err != nil {
		return time.Time{}, s.wrapWrite("renew", t.Lease, err)
	}
	if !r.Renewed {
		return time.Time{}, s.lost(ctx, t, "renew")
	}
	if r.LeasedUntilMs > 0 {
		return time.UnixMilli(r.LeasedUntilMs), nil
	}
	return time.Time{}, nil
}

// RenewBatch renews many held leases together in a few statements, for a
// process that holds one lease per tenant or shard. It returns one error per
// token, in order: nil, or an error wrapping ErrLost for a token that no
// longer holds its lease (one lost lease does not fail the others). The
// second result is an error of the whole batch (database unreachable).
//
// Observers see the batch (OpRenewBatch) and, inside it, each token's
// renewal (OpRenewBatchToken) with its lease and result: its own error, or
// the error of the whole batch.
func (s *Store) RenewBatch(ctx context.Context, ts []Token, ttl time.Duration) (errs []error, err error) {
	ctx, done := s.observe(ctx, OpRenewBatch, "")
	each := s.observeEach(ctx, OpRenewBatchToken, ts)
	defer func() {
		e := Event{Err: err, Count: len(ts), ExpiresIn: okTTL(err, ttl)}
		for _, x := range errs {
			if x != nil {
				e.Lost++
			}
		}
		for i, end := range each {
			te := Event{Fence: ts[i].Fence, Err: err}
			if err == nil {
				te.Err = errs[i]
			}
			te.ExpiresIn = okTTL(te.Err, ttl)
			end(te)
		}
		done(e)
	}()
	if err := ValidateTTL(ttl); err != nil {
		return nil, err
	}
	ps := make([]driver.TokenParams, len(ts))
	for i, t := range ts {
		if err := validateToken(t); err != nil {
			return nil, fmt.Errorf("token %d: %w", i, err)
		}
		ps[i] = tp(t)
	}
	out := make([]error, len(ts))
	if len(ts) == 0 {
		return out, nil
	}
	if err := notSent(ctx, "renew batch", ""); err != nil {
		return nil, err
	}
	rs, err := s.drv.LeaseRenewBatch(ctx, ps, ttlMillis(ttl))
	if err != nil {
		return nil, s.wrapWrite("renew batch", "", err)
	}
	for i, r := range rs {
		if !r.Renewed {
			out[i] = s.lost(ctx, ts[i], "renew")
		}
	}
	return out, nil
}

// Release gives the lease up. The row stays, so the next acquisition
// continues the fence. Releasing a token that no longer holds the lease never
// touches a newer holder and returns an error wrapping ErrLost.
func (s *Store) Release(ctx context.Context, t Token) (err error) {
	ctx, done := s.observe(ctx, OpRelease, t.Lease)
	defer func() { done(Event{Fence: t.Fence, Err: err}) }()
	if err := validateToken(t); err != nil {
		return err
	}
	if err := notSent(ctx, "release", t.Lease); err != nil {
		return err
	}
	ok, err := s.drv.LeaseRelease(ctx, tp(t))
	if err != nil {
		return s.wrapWrite("release", t.Lease, err)
	}
	if !ok {
		return s.lost(ctx, t, "release")
	}
	return nil
}

// IsHeld reports whether t still holds its lease by the database clock. It is
// for display and early exit only: a check followed by a separate write is a
// race; make the write itself fenced (Exec, InTx).
func (s *Store) IsHeld(ctx context.Context, t Token) (bool, error) {
	if err := validateToken(t); err != nil {
		return false, err
	}
	ok, err := s.drv.LeaseIsHeld(ctx, tp(t))
	if err != nil {
		return false, s.wrap("is-held", t.Lease, err)
	}
	return ok, nil
}

// Check returns nil if t holds its lease, else an error wrapping ErrLost that
// says why. The same caveat as IsHeld applies.
func (s *Store) Check(ctx context.Context, t Token) error {
	ok, err := s.IsHeld(ctx, t)
	if err != nil {
		return err
	}
	if !ok {
		return s.lost(ctx, t, "check")
	}
	return nil
}

// State is a lease's state as the database sees it.
type State string

// Lease states.
const (
	StateHeld     State = "held"
	StateExpired  State = "expired"
	StateReleased State = "released"
	StateRevoked  State = "revoked"
)

// LeaseInfo is a lease row as the database sees it.
type LeaseInfo struct {
	Name  string
	State State
	Owner string
	// Holder is the name of the owner of the last acquisition (WithHolder):
	// "" after a revoke or raise, and for a lease last acquired before
	// schema v3 or by a version of fence that did not record it.
	Holder     string
	Fence      int64
	ExpiresAt  time.Time     // zero when released or revoked
	AcquiredAt time.Time     // database time of the last acquisition
	UpdatedAt  time.Time     // database time of the last change
	DBNow      time.Time     // the database clock when the row was read
	Remaining  time.Duration // until expiry, by the database clock; 0 unless held
}

func info(l driver.Lease) LeaseInfo {
	i := LeaseInfo{
		Name:       l.Name,
		Owner:      l.Owner,
		Holder:     l.Holder,
		Fence:      l.Fence,
		AcquiredAt: time.UnixMilli(l.AcquiredAtMs),
		UpdatedAt:  time.UnixMilli(l.UpdatedAtMs),
		DBNow:      time.UnixMilli(l.NowMs),
	}
	if l.LeasedUntilMs > 0 {
		i.ExpiresAt = time.UnixMilli(l.LeasedUntilMs)
	}
	switch {
	case l.LeasedUntilMs > l.NowMs:
		i.State = StateHeld
		i.Remaining = time.Duration(l.LeasedUntilMs-l.NowMs) * time.Millisecond
	case l.State == driver.StateRevoked:
		i.State = StateRevoked
	case l.State == driver.StateReleased:
		i.State = StateReleased
	default:
		i.State = StateExpired
	}
	return i
}

// Get returns one lease's state, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (LeaseInfo, error) {
	if err := ValidateName(name); err != nil {
		return LeaseInfo{}, err
	}
	l, ok, err := s.drv.LeaseGet(ctx, name)
	if err != nil {
		return LeaseInfo{}, s.wrap("get", name, err)
	}
	if !ok {
		return LeaseInfo{}, fmt.Errorf("%w: lease %q", ErrNotFound, name)
	}
	return info(l), nil
}

// List returns every lease, ordered by name. ListPage reads a large table
// a page at a time.
func (s *Store) List(ctx context.Context) ([]LeaseInfo, error) {
	out, _, err := s.ListPage(ctx, LeaseFilter{})
	return out, err
}

// LeaseFilter selects one page of leases for ListPage.
type LeaseFilter struct {
	// After keeps only names after it, byte-wise ("" from the start): the
	// last name of one page is the cursor of the next.
	After string
	Limit int // 0: no limit
}

// ListPage returns the leases f selects, ordered by name byte-wise, and the
// database clock they were judged against (also in each LeaseInfo.DBNow,
// but here even for an empty page).
func (s *Store) ListPage(ctx context.Context, f LeaseFilter) ([]LeaseInfo, time.Time, error) {
	if f.Limit < 0 {
		return nil, time.Time{}, fmt.Errorf("%w: negative limit %d", ErrInvalid, f.Limit)
	}
	ls, now, err := s.drv.LeaseList(ctx, driver.LeaseFilter{After: f.After, Limit: f.Limit})
	if err != nil {
		return nil, time.Time{}, s.wrap("list", "", err)
	}
	out := make([]LeaseInfo, len(ls))
	for i, l := range ls {
		out[i] = info(l)
	}
	return out, time.UnixMilli(now), nil
}

// Revoke force-releases a lease: it bumps the fence and clears the owner
// and the holder name (the run ledger keeps who held it), so
// the current holder's renewals and fenced writes fail from now on. It returns
// the new fence. For operators; a holder gives a lease up with Release.
func (s *Store) Revoke(ctx context.Context, name string) (fence int64, err error) {
	ctx, done := s.observe(ctx, OpRevoke, name)
	defer func() { done(Event{Fence: fence, Err: err}) }()
	if err := ValidateName(name); err != nil {
		return 0, err
	}
	if err := notSent(ctx, "revoke", name); err != nil {
		return 0, err
	}
	f, ok, err := s.drv.LeaseRevoke(ctx, name)
	if err != nil {
		return 0, s.wrapWrite("revoke", name, err)
	}
	if !ok {
		return 0, fmt.Errorf("%w: lease %q", ErrNotFound, name)
	}
	s.log.InfoContext(ctx, "fence: revoked", "lease", name, "fence", f)
	return f, nil
}

// Now returns the database clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	ms, err := s.drv.Now(ctx)
	if err != nil {
		return time.Time{}, s.wrap("now", "", err)
	}
	return time.UnixMilli(ms), nil
}

// lost builds the LostError for a refused token, reading the row to say why.
// The read is after the refusal, so the reason is the best explanation the
// database can give now; the refusal itself was decided atomically.
func (s *Store) lost(ctx context.Context, t Token, op string) error {
	e := &LostError{Lease: t.Lease, Fence: t.Fence, Reason: LostUnknown, Op: op}
	rctx, cancel := followUp(ctx)
	defer cancel()
	l, ok, err := s.drv.LeaseGet(rctx, t.Lease)
	switch {
	case err != nil:
	case !ok:
		e.Reason = LostMissing
	default:
		e.Current = l.Fence
		switch {
		case l.Fence > t.Fence && l.State == driver.StateRevoked:
			e.Reason = LostRevoked
		case l.Fence > t.Fence:
			e.Reason = LostSuperseded
		case l.Fence == t.Fence && l.Owner == t.Owner && l.State == driver.StateReleased:
			e.Reason = LostReleased
		case l.Fence == t.Fence && l.Owner == t.Owner && l.LeasedUntilMs <= l.NowMs:
			e.Reason = LostExpired
		}
	}
	s.log.WarnContext(ctx, "fence: token refused", "lease", t.Lease, "fence", t.Fence, "current", e.Current, "reason", string(e.Reason), "op", op)
	return e
}

// wrap wraps a database error of a read.
func (s *Store) wrap(op, lease string, err error) error {
	return &dbError{op: op, lease: lease, err: err, retryable: s.drv.IsRetryable(err)}
}

// wrapWrite wraps a database error of a write: unless the statement
// certainly did not take effect (the database rejected it, or it was never
// sent), the write may have committed before the connection failed, so the
// outcome is reported as unknown.
func (s *Store) wrapWrite(op, lease string, err error) error {
	var ns *notSentError
	if errors.As(err, &ns) {
		return err
	}
	w := s.wrap(op, lease, err)
	if s.definite(err) {
		return w
	}
	return &AmbiguousError{Op: op, Lease: lease, Err: w}
}

// definite reports whether err says that the statement did not commit: the
// database's own error answer, a connection that was never made, or a
// failure the client found before sending (database/sql's ErrBadConn, which
// a driver may only return when the server cannot have run the statement,
// and database/sql's own argument checks). Anything else, a failure between
// us and the commit, leaves the outcome unknown.
//
// An error marked driver.AfterWriter is never definite: it came after a
// write of the same call (MySQL's read-back of LAST_INSERT_ID after an
// autocommit revoke or acquire), so even an ErrBadConn inside it leaves the
// write's outcome unknown. The Galera torture caught a revoke that
// committed while it was reported failed this way. An error marked
// driver.BeforeWriter is definite: the call had sent only reads.
func (s *Store) definite(err error) bool {
	var aw driver.AfterWriter
	if errors.As(err, &aw) && aw.AfterWrite() {
		return false
	}
	var bw driver.BeforeWriter
	if errors.As(err, &bw) && bw.BeforeWrite() {
		return true
	}
	return s.drv.IsServerError(err) || errors.Is(err, sqldriver.ErrBadConn) || clientArgError(err)
}

// clientArgError reports database/sql's refusals of the arguments, which it
// makes before the statement is executed (fmt errors, so only their text
// tells them apart: convert.go's "sql: expected %d arguments, got %d" and
// "sql: converting argument …").
func clientArgError(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		msg := e.Error()
		if strings.HasPrefix(msg, "sql: expected ") && strings.Contains(msg, " arguments, got ") ||
			strings.HasPrefix(msg, "sql: converting argument ") {
			return true
		}
	}
	return false
}

// notSent refuses to start a write whose context has already ended: nothing
// is sent, so the failure is definite, and it wraps the context's cause (a
// job cancelled by the runner because its lease was lost gets ErrLost).
// database/sql returns the bare context error both when it never sent the
// statement and when the context ended while waiting for the reply, so only
// a check before the call can tell the two apart.
//
// A context of a Run job or an Elect leader is over as soon as its renew
// deadline has passed, even if the runner's timer has not yet cancelled
// it: a process resumed after a pause past its TTL runs the job's next
// statement before that timer, and the statement would then be cancelled
// in flight, its outcome unknown. The keeper is asked first (keep.Check),
// so the write is refused unsent, with the runner's cause.
func notSent(ctx context.Context, op, lease string) error {
	if k, ok := keep.FromContext(ctx); ok {
		k.Check()
	}
	if ctx.Err() == nil {
		return nil
	}
	return &notSentError{op: op, lease: lease, cause: context.Cause(ctx), err: ctx.Err()}
}

// notSentError is a write that was not attempted because its context had
// ended. It is not retryable: the caller's context is over.
type notSentError struct {
	op, lease  string
	cause, err error
}

func (e *notSentError) Error() string {
	if e.lease != "" {
		return fmt.Sprintf("fence: %s of lease %q not sent, its context had ended: %v", e.op, e.lease, e.cause)
	}
	return fmt.Sprintf("fence: %s not sent, its context had ended: %v", e.op, e.cause)
}

// Unwrap gives both the cause and the context's own error, so errors.Is
// finds context.Canceled (or DeadlineExceeded) and, say, ErrLost.
func (e *notSentError) Unwrap() []error { return []error{e.cause, e.err} }

// Follow-up reads explain or settle a write's answer (why a token was
// refused, whether an unanswered acquire or completion committed). They
// run within the caller's deadline, at most followUpMax; when the caller's
// context has already ended they get followUpGrace, detached, so a refusal
// that arrived just in time is still explained. Without a bound a read on a
// black-holed connection kept a call with a 2 s deadline for 20 s.
const (
	followUpMax   = 2 * time.Second
	followUpGrace = 250 * time.Millisecond
)

func followUp(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() != nil {
		return context.WithTimeout(context.WithoutCancel(ctx), followUpGrace)
	}
	return context.WithTimeout(ctx, followUpMax)
}

func tp(t Token) driver.TokenParams {
	return driver.TokenParams{Name: t.Lease, Owner: t.Owner, Fence: t.Fence}
}

func okTTL(err error, ttl time.Duration) time.Duration {
	if err != nil {
		return 0
	}
	return ttl
}
