// Package postgres is fence's PostgreSQL driver: the SQL of fenced leases
// and the run ledger for PostgreSQL 12 and later, over database/sql with
// pgx's stdlib driver (New) or over pgx's own pool with no database/sql in
// between (NewPool). Both run the same statements.
//
// Every statement lives in an embedded .sql file next to this package
// (queries/, fragments/, migrations/); the only text ever substituted into
// them is the validated table prefix. Validity is always judged by the
// database clock, read with clock_timestamp(): now() is the start of the
// transaction and goes stale inside a caller's long transaction.
//
// A program hands a driver to the root package:
//
//	drv, err := postgres.New(db, "")      // or NewPool(pool, ""), OpenDriver(dsn, "")
//	store, err := fence.New(ctx, drv)
//
// Only what a program imports is linked: a PostgreSQL program does not
// carry the SQLite or MySQL drivers.
package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencekit/fence/internal/driver"
)

var _ driver.Driver = (*Driver)(nil)

var prefixRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,40}$`)

// Driver runs fence's statements on one PostgreSQL database with one table
// prefix. It is safe for concurrent use.
type Driver struct {
	db     *sql.DB       // nil for a driver made by NewPool
	pool   *pgxpool.Pool // nil for a driver made by New
	c      conn          // whichever of the two it is
	prefix string
	q      *statements
	owned  bool // OpenDriver opened db: Close closes it

	hubOnce sync.Once
	h       *hub // fast handoff (handoff.go), started by the first waiter

	// hints picks LeaseAcquire's first statement (lease.go).
	hints driver.Hints

	// fencedRefusal is fencedSQLPolicy's answer for the server, set by
	// CheckSession; nil until then.
	fencedRefusal atomic.Pointer[string]
}

// New returns a driver over db for the tables named prefix+"leases",
// prefix+"runs" and prefix+"schema" ("" means "fence_"), for fence.New.
// db should come from Open (or another pgx stdlib handle): the batch renew
// passes Go slices as PostgreSQL arrays. The caller keeps db: the store's
// Close does not close it.
func New(db *sql.DB, prefix string) (*Driver, error) {
	if db == nil {
		return nil, errors.New("postgres: nil *sql.DB")
	}
	d, err := build(sqlConn{db}, orDefault(prefix))
	if err != nil {
		return nil, err
	}
	d.db = db
	return d, nil
}

// NewPool returns a driver over pgx's own connection pool, for programs
// that use pgx natively and not database/sql. It runs the same statements
// as New. The pool's default query mode (a prepared statement cached per
// connection) suits them: each is a fixed text. Behind a transaction-mode
// pooler such as PgBouncer, configure the pool with
// QueryExecModeExec or QueryExecModeDescribeExec, as for any pgx program.
func NewPool(pool *pgxpool.Pool, prefix string) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("postgres: nil *pgxpool.Pool")
	}
	d, err := build(poolConn{pool}, orDefault(prefix))
	if err != nil {
		return nil, err
	}
	d.pool = pool
	return d, nil
}

func build(c conn, prefix string) (*Driver, error) {
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("postgres: table prefix %q must match %s", clip(prefix), prefixRE)
	}
	q, err := loadStatements(prefix)
	if err != nil {
		return nil, err
	}
	return &Driver{c: c, prefix: prefix, q: q}, nil
}

// NewPoolConfig parses dsn into a pgxpool configuration, for a caller that
// makes its own pool with pgxpool.NewWithConfig. dsn is a postgres:// or
// postgresql:// URL; pool_max_conns and the other pool_ parameters apply.
// Its errors never contain the password.
func NewPoolConfig(dsn string) (*pgxpool.Config, error) {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || !(strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql")) {
		return nil, errors.New("postgres: DSN is not a postgres:// or postgresql:// URL")
	}
	dsn = strings.ToLower(scheme) + dsn[len(scheme):]
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// Not wrapped, for the reason NewConnector gives.
		return nil, fmt.Errorf("postgres: invalid DSN: %s", scrubPassword(err.Error(), dsn))
	}
	if err := forceSettings(cfg.ConnConfig.RuntimeParams); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Open opens a PostgreSQL database through pgx's stdlib driver. dsn is a
// postgres:// or postgresql:// URL in pgx's syntax. It does not connect; the
// first use (or PingContext) does. Its errors never contain the password.
func Open(dsn string) (*sql.DB, error) {
	c, err := NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// NewConnector returns the connector Open opens its handle with, for a
// caller that wraps connections (instrumentation, round-trip counting) and
// calls sql.OpenDB itself. Its errors never contain the password.
func NewConnector(dsn string) (sqldriver.Connector, error) {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || !(strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql")) {
		// Not echoed: without a URL's structure there is no telling where
		// a password would be.
		return nil, errors.New("postgres: DSN is not a postgres:// or postgresql:// URL")
	}
	// pgx recognises the URL form only by a lower-case scheme.
	dsn = strings.ToLower(scheme) + dsn[len(scheme):]
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// Not wrapped: pgx keeps the original DSN, password included, in
		// the error chain (ParseConfigError.ConnString).
		return nil, fmt.Errorf("postgres: invalid DSN: %s", scrubPassword(err.Error(), dsn))
	}
	if err := forceSettings(cfg.RuntimeParams); err != nil {
		return nil, err
	}
	return stdlib.GetConnector(*cfg), nil
}

// forced are the session settings Open, NewConnector and NewPoolConfig send
// in every connection's startup packet, over the role's, the database's and
// the server's defaults:
//
//   - default_transaction_isolation 'read committed': fence's statements are
//     written for it. Under REPEATABLE READ or SERIALIZABLE a lease statement
//     that meets a concurrent takeover fails with a serialization error
//     instead of answering held or lost. A caller's own transaction may still
//     ask for another level (sql.TxOptions, pgx.TxOptions).
//   - default_transaction_read_only off: a read-only default would refuse
//     every acquire and renewal.
//
// synchronous_commit is not forced: 'local', 'remote_write', 'on' and
// 'remote_apply' all make a commit durable on this server before fence
// reports it, and forcing one would override a replication setup's choice.
// 'off' is refused (by CheckSession and in a DSN): a server crash could
// lose an acquisition already reported, and the next owner would get the
// same fence.
//
//go:embed queries/check_session.sql
var checkSessionSQL string

var forced = map[string]string{
	"default_transaction_isolation": "read committed",
	"default_transaction_read_only": "off",
	// The server must read statements as the UTF-8 that pgx sends: in a
	// client encoding such as SJIS a backslash can end a character, and a
	// literal would end elsewhere than fence reads it.
	"client_encoding": "UTF8",
}

// forceSettings adds the forced settings to a connection's runtime
// parameters, and refuses a DSN that sets one of them, or
// synchronous_commit=off, explicitly.
func forceSettings(rp map[string]string) error {
	for k, v := range rp {
		lk := strings.ToLower(k)
		if want, ok := forced[lk]; ok && !strings.EqualFold(strings.TrimSpace(v), want) {
			return &driver.SettingError{Msg: fmt.Sprintf("postgres: DSN sets %s to another value than fence's %q; remove the parameter", lk, want)}
		}
		if lk == "synchronous_commit" && isOff(v) {
			return &driver.SettingError{Msg: synchronousCommitOff}
		}
		if lk == "options" && (strings.Contains(strings.ToLower(v), "default_transaction_") || strings.Contains(strings.ToLower(v), "client_encoding")) {
			// The forced startup parameter wins over options=-c (measured
			// on PostgreSQL 15), so the DSN's wish would be silently
			// ignored: say so instead.
			return &driver.SettingError{Msg: "postgres: DSN options parameter sets a default_transaction_ setting or client_encoding, which fence forces; remove it from options"}
		}
	}
	for k, v := range forced {
		rp[k] = v
	}
	return nil
}

func isOff(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "false", "no", "0":
		return true
	}
	return false
}

const synchronousCommitOff = "postgres: synchronous_commit is off: a server crash could lose an acquisition fence already reported, " +
	"and the next owner would get the same fence; use synchronous_commit=on (a DSN parameter, ALTER ROLE … SET, or the server configuration)"

// CheckSession verifies, on the driver's handle or pool, the settings fence
// relies on, and returns a *driver.SettingError naming the setting and the
// fix for a wrong one: not a standby (pg_is_in_recovery), default and
// current transactions read-write, default isolation READ COMMITTED (READ
// UNCOMMITTED behaves as READ COMMITTED in PostgreSQL), synchronous_commit
// not off, client_encoding UTF8. Handles from Open, NewConnector and NewPoolConfig have them
// forced; a caller's own handle is checked on one connection, and every
// connection of a pool is assumed to be made alike.
func (d *Driver) CheckSession(ctx context.Context) error {
	var recovery bool
	var iso, defRO, ro, sync, enc string
	var version int
	err := d.c.queryRow(ctx, checkSessionSQL).Scan(&recovery, &iso, &defRO, &ro, &sync, &enc, &version)
	if err != nil {
		return err
	}
	refusal := fencedSQLPolicy(version)
	d.fencedRefusal.Store(&refusal)
	switch {
	case recovery:
		return &driver.SettingError{Msg: "postgres: the server is a standby (in recovery): fence needs the primary"}
	case defRO != "off" || ro != "off":
		return &driver.SettingError{Msg: "postgres: the session is read-only (default_transaction_read_only or transaction_read_only is on): " +
			"fence cannot take or renew a lease; unset default_transaction_read_only for the role or database, or open the store with fence.Open"}
	case iso != "read committed" && iso != "read uncommitted":
		return &driver.SettingError{Msg: fmt.Sprintf("postgres: default_transaction_isolation is %q: fence's lease statements are written for READ COMMITTED "+
			"and would fail with serialization errors under contention; set default_transaction_isolation='read committed' "+
			"(a DSN parameter, or RuntimeParams in the pgx config) and ask for stronger isolation per transaction instead, or open the store with fence.Open", iso)}
	case isOff(sync):
		return &driver.SettingError{Msg: synchronousCommitOff}
	case !strings.EqualFold(enc, "UTF8"):
		return &driver.SettingError{Msg: fmt.Sprintf("postgres: client_encoding is %s: the server would read fence's statements in that encoding, "+
			"where a backslash can be the second byte of a character (SJIS, BIG5, GBK, GB18030, UHC, JOHAB) and a literal ends elsewhere than fence reads it; "+
			"pgx sends UTF-8: remove client_encoding from the DSN or set it to UTF8", enc)}
	}
	return nil
}

// Dialect returns "postgres".
func (d *Driver) Dialect() string { return "postgres" }

// DB returns the database/sql handle, or nil for a driver made by NewPool.
func (d *Driver) DB() *sql.DB { return d.db }

// Pool returns the pgx pool, or nil for a driver made by New.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Placeholder returns "$": PostgreSQL numbers its placeholders.
func (d *Driver) Placeholder() string { return "$" }

// Now returns the database clock in milliseconds since the Unix epoch.
func (d *Driver) Now(ctx context.Context) (int64, error) {
	var ms int64
	err := d.c.queryRow(ctx, d.q.now).Scan(&ms)
	return ms, err
}

// GuardSQL returns the fence predicate for a caller's own statement, with
// placeholders $first, $first+1, $first+2 bound to args. It reads the lease
// row FOR SHARE: under READ COMMITTED a plain EXISTS on the lease row fails
// open when the caller's statement waits for its target row while a takeover
// commits, and FOR KEY SHARE does not conflict with the takeover's UPDATE.
func (d *Driver) GuardSQL(t driver.TokenParams, first int) (string, []any) {
	return d.q.guard(first), []any{t.Name, t.Owner, t.Fence}
}

// LockTx share-locks the lease row in the caller's transaction q while the
// token is valid. Under REPEATABLE READ or SERIALIZABLE a takeover committed
// after the transaction's snapshot surfaces as a serialization failure
// (retryable) rather than as false.
func (d *Driver) LockTx(ctx context.Context, tx *sql.Tx, t driver.TokenParams) (bool, error) {
	var ok bool
	err := tx.QueryRowContext(ctx, d.q.lockTx, t.Name, t.Owner, t.Fence).Scan(&ok)
	return ok, err
}

// LockTxTop is LockTx for the caller's transaction (Store.CheckTx): it
// fails with SQLSTATE 25001 when the transaction is inside a savepoint,
// where the lock would not outlast a rollback to it (lock_tx_top.sql).
func (d *Driver) LockTxTop(ctx context.Context, tx *sql.Tx, t driver.TokenParams) (bool, error) {
	var ok bool
	err := tx.QueryRowContext(ctx, d.q.lockTxTop, t.Name, t.Owner, t.Fence).Scan(&ok)
	return ok, err
}

// InSubtransaction reports whether err is LockTxTop's refusal inside a
// savepoint.
func (d *Driver) InSubtransaction(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "25001" && strings.Contains(pe.Message, "subtransaction")
}

// LockTxPgx is LockTx for a transaction of pgx's own API.
func (d *Driver) LockTxPgx(ctx context.Context, tx pgx.Tx, t driver.TokenParams) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, d.q.lockTx, t.Name, t.Owner, t.Fence).Scan(&ok)
	return ok, err
}

// DropTables drops every table Migrate created, and its function
// (lease_until), if they exist.
func (d *Driver) DropTables(ctx context.Context) error {
	_, err := d.c.exec(ctx, d.q.dropTables)
	return err
}

// scrubPassword replaces every form of dsn's password found in msg. It does
// not rely on dsn being a well-formed URL: a DSN that fails to parse is the
// very case whose error must still be safe to print.
func scrubPassword(msg, dsn string) string {
	for _, pw := range passwords(dsn) {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}

var queryPasswordRE = regexp.MustCompile(`(?i)(?:^|[?&])password=([^&#]*)`)

// passwords returns the password candidates in dsn, longest first (so that
// a password's escaped form is replaced before a substring of it), in raw,
// URL-escaped and unescaped forms.
func passwords(dsn string) []string {
	var raw []string
	if _, rest, ok := strings.Cut(dsn, "://"); ok {
		// The authority ends at the last '@' before the path: an
		// unescaped '@' or '/' in a password is exactly what breaks parsing.
		auth := rest
		if i := strings.IndexAny(auth, "?#"); i >= 0 {
			auth = auth[:i]
		}
		if at := strings.LastIndexByte(auth, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(auth[:at], ":"); ok {
				raw = append(raw, pw)
			}
		}
		if _, query, ok := strings.Cut(rest, "?"); ok {
			for _, m := range queryPasswordRE.FindAllStringSubmatch(query, -1) {
				raw = append(raw, m[1])
			}
		}
	}
	var out []string
	for _, pw := range raw {
		out = append(out, pw, url.QueryEscape(pw), url.PathEscape(pw))
		for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			if u, err := unescape(pw); err == nil {
				out = append(out, u, url.QueryEscape(u), url.PathEscape(u))
			}
		}
	}
	out = slices.DeleteFunc(out, func(s string) bool { return s == "" })
	slices.SortFunc(out, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(out)
}

func clip(s string) string {
	const max = 60
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// NowSQL returns the database clock in milliseconds as an SQL expression
// (clock_timestamp(), not the transaction's start).
func (d *Driver) NowSQL() string { return d.q.nowMs }
