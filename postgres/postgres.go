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
// Most callers use the root package (fence.Open or fence.OpenDB with
// fence.Postgres) rather than this package directly.
package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
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

	hubOnce sync.Once
	h       *hub // fast handoff (handoff.go), started by the first waiter
}

// New returns a driver over db for the tables named prefix+"leases",
// prefix+"runs" and prefix+"schema". db should come from Open (or another
// pgx stdlib handle): the batch renew passes Go slices as PostgreSQL arrays.
func New(db *sql.DB, prefix string) (*Driver, error) {
	if db == nil {
		return nil, errors.New("postgres: nil *sql.DB")
	}
	d, err := build(sqlConn{db}, prefix)
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
	d, err := build(poolConn{pool}, prefix)
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
	return stdlib.GetConnector(*cfg), nil
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

// LockTxPgx is LockTx for a transaction of pgx's own API.
func (d *Driver) LockTxPgx(ctx context.Context, tx pgx.Tx, t driver.TokenParams) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, d.q.lockTx, t.Name, t.Owner, t.Fence).Scan(&ok)
	return ok, err
}

// DropTables drops the three tables, if they exist.
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
