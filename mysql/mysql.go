// Package mysql is fence's driver for MySQL 8.0 and MariaDB 10.6+ (InnoDB),
// through database/sql and github.com/go-sql-driver/mysql.
//
// Every statement is written in the syntax both servers accept, so there is
// one code path: no RETURNING (MariaDB only), LOCK IN SHARE MODE rather than
// FOR SHARE (MySQL only), no VALUES() in ON DUPLICATE KEY UPDATE (deprecated
// in MySQL 8.0.20+) and no user variables in expressions (deprecated in
// MySQL 8). Values that a single statement must hand back (the new fence of
// an acquire or a revoke, the new expiry of a renew) come back as the insert
// id through LAST_INSERT_ID(expr); a trigger on the table makes MariaDB
// report that insert id as 0, and then the session's LAST_INSERT_ID() is
// read back on the same connection.
//
// Time is integer milliseconds of the database clock, computed independently
// of the session time zone. Two clocks are used, chosen per statement (see
// the comments in queries/*.sql):
//
//   - the statement's start (UTC_TIMESTAMP(6)), fixed for the whole
//     statement: used where several expressions must agree (acquire's IFs,
//     the guard that a user's multi-row statement may evaluate per row) and
//     for reads that never wait;
//   - the execution time (SYSDATE(6)), used where a single-row check runs
//     after waiting for a row lock (renew, release, LockTx, run start, fenced
//     completion), so that a lease that lapsed during the wait is seen as
//     lapsed. A server run with --sysdate-is-now falls back to the first.
//     (Statement-based replication would replay SYSDATE() differently; use
//     row-based binlogs, the default of MySQL 8.)
//
// The guard predicate and LockTx read the lease row with LOCK IN SHARE MODE.
// InnoDB would read it without a lock (a snapshot) in a single-table UPDATE
// or an INSERT ... SELECT under READ COMMITTED, and a stale owner's write
// that was blocked on its target row would then land after a takeover; with
// the share lock a takeover waits for the write, or the write sees the
// takeover. The tests show both behaviours on the real server.
package mysql

import (
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/fencekit/fence/internal/driver"
)

// Migrations holds the schema files (migrations/NNNN_*.sql) for users who run
// their own migration tool. Replace {{prefix}} with the table prefix (default
// fence_) and split at the semicolons (there are none inside a statement).
// Record applied
// versions in <prefix>schema (version INT PRIMARY KEY, applied_at_ms BIGINT)
// so that Migrate agrees with the tool.
//
//go:embed migrations/*.sql
var Migrations embed.FS

//go:embed queries/*.sql
var queries embed.FS

// nowMs is the statement's start in Unix milliseconds. UTC_TIMESTAMP is the
// start time in UTC whatever the session time zone, and TIMESTAMPDIFF on two
// DATETIMEs is plain arithmetic, so no time zone conversion is involved.
const nowMs = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"

// floorUs is the statement's start in Unix microseconds: the floor below
// which no new fence goes (docs/adr/0004-fence-floor.md).
const floorUs = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// execNowMs is the time the expression is evaluated, in Unix milliseconds.
// SYSDATE() is execution time but in the session time zone, so it is taken
// as an offset from the statement start: NOW(6) and UTC_TIMESTAMP(6) are the
// same instant, and SYSDATE(6) - NOW(6) is the time since, in local time.
// That is exact unless a DST change falls inside the statement, which cannot
// happen in the UTC session that Open sets up.
const execNowMs = "((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))" +
	" + TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6))) DIV 1000)"

var prefixRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,40}$`)

// Driver implements fence's driver interface for MySQL and MariaDB.
type Driver struct {
	db     *sql.DB
	prefix string
	owned  bool // OpenDriver opened db: Close closes it
	q      map[string]string

	// returning is whether the server takes INSERT ... RETURNING (MariaDB
	// 10.5+): returningUnknown until the first acquire asks.
	returning atomic.Int32
	// galera is whether the server is a Galera node (galera.go):
	// galeraUnknown until CheckSession or the first fenced write asks.
	galera atomic.Int32
	// fencedRefusal is fencedSQLPolicy's answer for the server, set by
	// CheckSession; nil until then.
	fencedRefusal atomic.Pointer[string]
	stmts         *stmtCache
	// hints picks LeaseAcquire's first statement (hints.go).
	hints driver.Hints
	// watches polls the leases AcquireWait waits for (handoff.go).
	watches watches
}

const (
	returningUnknown = iota
	returningYes
	returningNo
)

var _ driver.Driver = (*Driver)(nil)

// New returns the driver for db with tables named with prefix. db may come
// from Open or from the caller; the driver does not rely on clientFoundRows,
// interpolateParams or the session time zone.
func New(db *sql.DB, prefix string) (*Driver, error) {
	if prefix == "" {
		prefix = driver.DefaultPrefix
	}
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("mysql: table prefix %q must match %s", prefix, prefixRE)
	}
	d := &Driver{db: db, prefix: prefix, q: map[string]string{}}
	files, err := fs.Glob(queries, "queries/*.sql")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := queries.ReadFile(f)
		if err != nil {
			return nil, err
		}
		d.q[strings.TrimSuffix(path.Base(f), ".sql")] = stripComments(string(b))
	}
	guard := d.expand(d.q["guard"])
	for k, v := range d.q {
		d.q[k] = strings.ReplaceAll(d.expand(v), "{{guard}}", guard)
	}
	d.q["lease_acquire_returning"] = d.q["lease_acquire"] + "\n" + d.q["lease_acquire_returning"]
	d.stmts = &stmtCache{m: map[string]*sql.Stmt{}, preparing: map[string]bool{}}
	runtime.AddCleanup(d, (*stmtCache).close, d.stmts)
	return d, nil
}

func (d *Driver) expand(s string) string {
	return strings.NewReplacer("{{prefix}}", d.prefix, "{{now}}", nowMs, "{{exec_now}}", execNowMs, "{{floor_us}}", floorUs).Replace(s)
}

// stripComments drops "--" comment lines. They would travel with every
// statement, and go-sql-driver's interpolateParams counts every '?' in the
// text, comments included.
func stripComments(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
	}
	return strings.TrimSpace(b.String())
}

// splitStatements splits a file of statements at its semicolons; the schema
// files contain none inside a statement.
func splitStatements(s string) []string {
	var out []string
	for st := range strings.SplitSeq(stripComments(s), ";") {
		if st = strings.TrimSpace(st); st != "" {
			out = append(out, st)
		}
	}
	return out
}

// Dialect returns "mysql".
func (d *Driver) Dialect() string { return "mysql" }

// DB returns the handle.
func (d *Driver) DB() *sql.DB { return d.db }

// Placeholder returns "?".
func (d *Driver) Placeholder() string { return "?" }

// NowSQL returns the database clock in milliseconds as an SQL expression
// (the statement's start, independent of the session time zone).
func (d *Driver) NowSQL() string { return nowMs }
