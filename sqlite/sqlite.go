// Package sqlite is fence's driver for SQLite, the embedded default, through
// the pure-Go modernc.org/sqlite (no cgo). Open configures the connection the
// way the driver relies on:
//
//   - WAL, so readers do not block the writer;
//   - synchronous=FULL, so a committed fence increment survives power loss
//     (with NORMAL the last commits can roll back and a fence be handed out
//     twice);
//   - _txlock=immediate, so every transaction takes the write lock at BEGIN.
//     A deferred transaction that reads and then writes can fail with
//     SQLITE_BUSY_SNAPSHOT under contention; an immediate one waits instead;
//   - busy_timeout, so writers queue rather than fail;
//   - a new database file is created 0600, and so its -wal and -shm files:
//     it holds every holder's owner token.
//
// SQLite serialises writers, so the write lock itself is what orders a
// fenced write against a takeover: no row locks are needed.
package sqlite

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	sqlitelib "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/fencekit/fence/internal/driver"
)

// Migrations holds the schema files, for users who run their own migration
// tool. Replace {{prefix}} with the table prefix (default fence_) and
// {{now}} is not used in them.
//
//go:embed migrations/*.sql
var Migrations embed.FS

//go:embed queries/*.sql
var queries embed.FS

// now is the database clock in integer milliseconds. SQLite keeps 'now' fixed
// for the duration of one statement.
const now = "CAST(unixepoch('subsec') * 1000 AS INTEGER)"

// floorUs is the clock in integer microseconds, the floor below which no
// new fence goes (docs/adr/0004-fence-floor.md). SQLite's own clock has
// millisecond resolution: a table restored within the millisecond of its
// last acquisition would hand that fence out again (seen in the conformance
// suite's rollback case). So the statement also takes the Go clock in
// microseconds, bound as the statement's last numbered parameter (see
// floorArg): an embedded database runs on the host whose clock SQLite
// reads, the same wall clock at a finer grain. It only raises the floor;
// validity is judged by 'now' alone. (Not a named parameter: SQLite gives a
// name that comes before ?1 in the text the number 1, the same slot as ?1.)
const floorUs = "max(" + now + " * 1000, ?%d)"

// floorArg is the Go clock's part of {{floor_us}}.
func floorArg() int64 { return time.Now().UnixMicro() }

var prefixRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,40}$`)

// Open opens a SQLite database file (":memory:" for a private in-memory one)
// with the settings this driver relies on.
func Open(file string) (*sql.DB, error) {
	c, err := NewConnector(file)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	if file == ":memory:" {
		// Every connection to :memory: is a different database.
		db.SetMaxOpenConns(1)
	}
	return db, nil
}

// NewConnector returns a connector for the file with Open's settings, for a
// caller that wraps connections (instrumentation, round-trip counting) and
// opens the handle with sql.OpenDB. For ":memory:" the handle must be limited
// to one connection (SetMaxOpenConns(1)), as Open does.
func NewConnector(file string) (sqldriver.Connector, error) {
	if file == "" {
		return nil, errors.New("sqlite: empty path")
	}
	if strings.ContainsAny(file, "?#") {
		return nil, fmt.Errorf("sqlite: path %q may not contain '?' or '#'", file)
	}
	if file != ":memory:" {
		createPrivate(file)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	if file != ":memory:" {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(FULL)")
	}
	c, err := sqlitelib.NewConnector("file:" + file + "?" + q.Encode())
	if err != nil {
		return nil, err
	}
	return busyRetry{c}, nil
}

// createPrivate creates file, when it does not exist, readable by its owner
// only: the database holds every holder's owner token, the capability to
// renew or release its lease, and SQLite would create it 0644 (less the
// umask). SQLite gives the -wal and -shm files the database file's mode, so
// they are 0600 too. An empty file is an empty database. An error is left
// for SQLite to report when it opens the file, in its own words.
func createPrivate(file string) {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		f.Close()
	}
}

// busyRetry retries a connection whose setup got SQLITE_BUSY. The first
// journal_mode(WAL) on a new file reads the header and then upgrades to a
// write to mark the file WAL; SQLite answers an upgrade from a read that is
// already open with an immediate SQLITE_BUSY, without the busy handler (it
// could deadlock), so busy_timeout does not help: several processes opening
// one new file at once saw "database is locked" (measured: 11 of 1,200
// concurrent opens). Once the file is WAL the pragma writes nothing.
type busyRetry struct{ sqldriver.Connector }

// busyWait bounds the retries like busy_timeout bounds a lock wait.
const busyWait = 10 * time.Second

func (b busyRetry) Connect(ctx context.Context) (sqldriver.Conn, error) {
	deadline := time.Now().Add(busyWait)
	for pause := time.Millisecond; ; pause = min(pause*2, 50*time.Millisecond) {
		c, err := b.Connector.Connect(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return c, err
		}
		t := time.NewTimer(pause + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

func isBusy(err error) bool {
	var se *sqlitelib.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// Driver implements fence's driver interface for SQLite.
type Driver struct {
	db     *sql.DB
	prefix string
	owned  bool // OpenDriver opened db: Close closes it
	memory bool // an SQLite :memory: handle, kept at one connection
	q      map[string]string
	guard  string
	stmts  *stmtCache
}

var _ driver.Driver = (*Driver)(nil)

// New returns the driver for db with tables named with prefix.
func New(db *sql.DB, prefix string) (*Driver, error) {
	if prefix == "" {
		prefix = driver.DefaultPrefix
	}
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("sqlite: table prefix %q must match %s", prefix, prefixRE)
	}
	d := &Driver{db: db, prefix: prefix, q: map[string]string{}}
	err := fs.WalkDir(queries, "queries", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := queries.ReadFile(p)
		if err != nil {
			return err
		}
		d.q[strings.TrimSuffix(path.Base(p), ".sql")] = d.expand(string(b))
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.guard = strings.TrimSpace(d.q["guard"])
	d.stmts = &stmtCache{m: map[string]*sql.Stmt{}}
	runtime.AddCleanup(d, (*stmtCache).close, d.stmts)
	return d, nil
}

func (d *Driver) expand(s string) string {
	return strings.NewReplacer("{{prefix}}", d.prefix, "{{now}}", now, "{{floor_us:2}}", fmt.Sprintf(floorUs, 2), "{{floor_us:5}}", fmt.Sprintf(floorUs, 5), "{{floor_us:1}}", fmt.Sprintf(floorUs, 1)).Replace(s)
}

// Dialect returns "sqlite".
func (d *Driver) Dialect() string { return "sqlite" }

// DB returns the handle.
func (d *Driver) DB() *sql.DB { return d.db }

// Placeholder returns "?".
func (d *Driver) Placeholder() string { return "?" }

// Migrate applies the embedded migrations in one write transaction.
func (d *Driver) Migrate(ctx context.Context) (int, error) {
	files, err := fs.Glob(Migrations, "migrations/*.sql")
	if err != nil {
		return 0, err
	}
	slices.Sort(files)
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, d.q["schema_create"]); err != nil {
		return 0, err
	}
	var have int
	if err := tx.QueryRowContext(ctx, d.q["schema_version"]).Scan(&have); err != nil {
		return 0, err
	}
	v := have
	for _, f := range files {
		n, err := strconv.Atoi(strings.SplitN(path.Base(f), "_", 2)[0])
		if err != nil {
			return 0, fmt.Errorf("sqlite: migration %s: name must start with a number", f)
		}
		if n <= have {
			continue
		}
		b, err := Migrations.ReadFile(f)
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, d.expand(string(b))); err != nil {
			return 0, fmt.Errorf("sqlite: migration %s: %w", f, err)
		}
		if _, err := tx.ExecContext(ctx, d.q["schema_insert"], n); err != nil {
			return 0, err
		}
		v = n
	}
	return v, tx.Commit()
}

// SchemaVersion returns the applied version, 0 when fence's tables are absent.
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := d.db.QueryRowContext(ctx, d.q["schema_version"]).Scan(&v)
	if err != nil && strings.Contains(err.Error(), "no such table") {
		return 0, nil
	}
	return v, err
}

// LeaseAcquire first reads the row by primary key: a lease held by another
// owner is refused by that read alone, without the write lock or a commit.
// A lapsed row is taken over by a compare-and-set on the fence it read
// (lease_take.sql, one UPDATE that returns nothing); a name never seen is
// inserted by the upsert. A compare-and-set that lost to another writer
// reads again: the row changed, so the next read sees who has it now.
//
// A lease this Driver itself released or revoked last is tried with the
// compare-and-set at once, on the fence it left there, without the read:
// the common case of a process taking a lease it let go (a scheduled job,
// a waiter of this process woken by the release), one statement. Only one
// attempt uses each such release, so contenders in the process do not all
// ask for the write lock; when the row changed meanwhile it matches
// nothing, and the read decides as above.
func (d *Driver) LeaseAcquire(ctx context.Context, p driver.AcquireParams) (driver.AcquireResult, error) {
	if f, ok := d.stmts.takeFreed(p.Name); ok {
		if r, done, err := d.take(ctx, p, f); err != nil || done {
			return r, err
		}
	}
	for range takeTries {
		l, ok, err := d.probe(ctx, p.Name)
		if err != nil {
			return driver.AcquireResult{}, err
		}
		if !ok {
			break // never seen: the upsert decides
		}
		if l.LeasedUntilMs > l.NowMs {
			return driver.AcquireResult{NowMs: l.NowMs, Holder: &l}, nil
		}
		if r, done, err := d.take(ctx, p, l.Fence); err != nil || done {
			return r, err
		}
	}
	st, err := d.stmt(ctx, "lease_acquire")
	if err != nil {
		return driver.AcquireResult{}, err
	}
	var r driver.AcquireResult
	err = writeOne(ctx, st, []any{p.Name, p.Owner, p.TTLMs, p.Holder, floorArg()}, &r.Fence, &r.LeasedUntilMs, &r.NowMs)
	if err == nil {
		r.Acquired = true
		return r, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return r, err
	}
	l, ok, err := d.LeaseGet(ctx, p.Name)
	if err == nil && ok {
		r.NowMs, r.Holder = l.NowMs, &l
	}
	return r, err
}

// take runs lease_take.sql: the row lapsed with fence was, becomes p's. done
// is false when it matched nothing (the row has another fence now, or has
// not lapsed by the database clock).
func (d *Driver) take(ctx context.Context, p driver.AcquireParams, was int64) (r driver.AcquireResult, done bool, err error) {
	st, err := d.stmt(ctx, "lease_take")
	if err != nil {
		return r, false, err
	}
	at := time.Now()
	ms, fence := at.UnixMilli(), max(was+1, at.UnixMicro())
	res, err := st.ExecContext(ctx, p.Name, p.Owner, was, p.Holder, fence, ms, p.TTLMs)
	if err != nil {
		return r, false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return r, false, err
	}
	return driver.AcquireResult{Acquired: true, Fence: fence, LeasedUntilMs: ms + p.TTLMs, NowMs: ms}, true, nil
}

// takeTries bounds LeaseAcquire's read and compare-and-set rounds before it
// leaves the decision to the upsert: each lost round means another writer
// changed the row in between, which a second read nearly always shows held.
const takeTries = 3

// probe reads the row for an acquisition (lease_probe.sql). NowMs is the Go
// clock read after the read: SQLite's clock is the host's, so a row whose
// expiry is past NowMs was valid by the database clock when it was read.
// Only what a refusal reports is read: State is "held" (a valid row always
// is), AcquiredAtMs and UpdatedAtMs are left 0.
func (d *Driver) probe(ctx context.Context, name string) (driver.Lease, bool, error) {
	st, err := d.stmt(ctx, "lease_probe")
	if err != nil {
		return driver.Lease{}, false, err
	}
	l := driver.Lease{Name: name, State: driver.StateHeld}
	err = st.QueryRowContext(ctx, name).Scan(&l.Owner, &l.Holder, &l.Fence, &l.LeasedUntilMs)
	l.NowMs = time.Now().UnixMilli()
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Lease{}, false, nil
	}
	return l, err == nil, err
}

// LeaseRenew extends a valid lease: one UPDATE without RETURNING, the new
// term counted from the Go clock read just before it (lease_renew.sql).
func (d *Driver) LeaseRenew(ctx context.Context, t driver.TokenParams, ttlMs int64) (driver.RenewResult, error) {
	st, err := d.stmt(ctx, "lease_renew")
	if err != nil {
		return driver.RenewResult{}, err
	}
	ms := time.Now().UnixMilli()
	res, err := st.ExecContext(ctx, t.Name, t.Owner, t.Fence, ttlMs, ms)
	if err != nil {
		return driver.RenewResult{}, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return driver.RenewResult{}, err
	}
	return driver.RenewResult{Renewed: true, LeasedUntilMs: ms + ttlMs, NowMs: ms}, nil
}

// LeaseRenewBatch renews every token in one autocommit statement.
func (d *Driver) LeaseRenewBatch(ctx context.Context, ts []driver.TokenParams, ttlMs int64) ([]driver.RenewResult, error) {
	out := make([]driver.RenewResult, len(ts))
	if len(ts) == 0 {
		return out, nil
	}
	arr := make([][3]any, len(ts))
	for i, t := range ts {
		arr[i] = [3]any{t.Name, t.Owner, t.Fence}
	}
	js, err := json.Marshal(arr)
	if err != nil {
		return nil, err
	}
	type key struct {
		name  string
		fence int64
	}
	got := map[key]driver.RenewResult{}
	rows, err := d.db.QueryContext(ctx, d.q["lease_renew_batch"], string(js), ttlMs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var k key
		r := driver.RenewResult{Renewed: true}
		if err := rows.Scan(&k.name, &k.fence, &r.LeasedUntilMs, &r.NowMs); err != nil {
			return nil, err
		}
		got[k] = r
	}
	// Close commits the autocommit statement; its error is the commit's.
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i, t := range ts {
		out[i] = got[key{t.Name, t.Fence}]
	}
	return out, nil
}

// LeaseRelease releases a valid lease, and wakes this process's waiters
// for it (handoff.go).
func (d *Driver) LeaseRelease(ctx context.Context, t driver.TokenParams) (bool, error) {
	ok, err := d.execOne(ctx, "lease_release", t.Name, t.Owner, t.Fence)
	if ok {
		d.stmts.freed(t.Name, t.Fence)
		d.released(ctx, t.Name)
	}
	return ok, err
}

// LeaseIsHeld reports whether the token is valid now: a primary-key read of
// the token's row, its expiry compared with the Go clock read after the
// read (SQLite's own clock, later than the statement's), so a lease that
// lapsed in between counts as not held.
func (d *Driver) LeaseIsHeld(ctx context.Context, t driver.TokenParams) (bool, error) {
	st, err := d.stmt(ctx, "lease_is_held")
	if err != nil {
		return false, err
	}
	var until int64
	err = st.QueryRowContext(ctx, t.Name, t.Owner, t.Fence).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil && until > time.Now().UnixMilli(), err
}

// LeaseGet reads one lease row.
func (d *Driver) LeaseGet(ctx context.Context, name string) (driver.Lease, bool, error) {
	st, err := d.stmt(ctx, "lease_get")
	if err != nil {
		return driver.Lease{}, false, err
	}
	l, err := scanLease(st.QueryRowContext(ctx, name))
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Lease{}, false, nil
	}
	return l, err == nil, err
}

// LeaseList reads one page of lease rows by name.
func (d *Driver) LeaseList(ctx context.Context, f driver.LeaseFilter) ([]driver.Lease, int64, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := d.db.QueryContext(ctx, d.q["lease_list"], f.After, limit)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []driver.Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	n, err := d.Now(ctx)
	return out, n, err
}

// LeaseRevoke bumps the fence and clears the owner.
func (d *Driver) LeaseRevoke(ctx context.Context, name string) (int64, bool, error) {
	st, err := d.stmt(ctx, "lease_revoke")
	if err != nil {
		return 0, false, err
	}
	var f int64
	err = writeOne(ctx, st, []any{name, floorArg()}, &f)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err == nil {
		d.stmts.freed(name, f)
		d.released(ctx, name)
	}
	return f, err == nil, err
}

// Now reads the database clock.
func (d *Driver) Now(ctx context.Context) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, d.q["now"]).Scan(&n)
	return n, err
}

// GuardSQL returns the fence predicate with three positional placeholders.
func (d *Driver) GuardSQL(t driver.TokenParams, first int) (string, []any) {
	return d.guard, []any{t.Name, t.Owner, t.Fence}
}

// LockTx verifies the token inside the caller's transaction. The transaction
// must hold the write lock (opened by a handle from Open, which begins
// IMMEDIATE); the lock is what serialises it with a takeover. The statement
// is the driver's prepared one, bound to tx (database/sql reuses the
// connection's preparation).
func (d *Driver) LockTx(ctx context.Context, tx *sql.Tx, t driver.TokenParams) (bool, error) {
	st, err := d.stmt(ctx, "lock_tx")
	if err != nil {
		return false, err
	}
	ts := tx.StmtContext(ctx, st)
	defer ts.Close()
	var ok bool
	err = ts.QueryRowContext(ctx, t.Name, t.Owner, t.Fence).Scan(&ok)
	return ok, err
}

// RunStart records a run for a valid token and abandons older running runs.
func (d *Driver) RunStart(ctx context.Context, p driver.StartRunParams) (int64, bool, error) {
	var id int64
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, d.q["run_start"], p.Token.Name, p.Token.Owner, p.Token.Fence, p.Detail).Scan(&id)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, d.q["run_abandon"], p.Token.Name, p.Token.Fence)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

// RunFinish is the fenced completion.
func (d *Driver) RunFinish(ctx context.Context, p driver.FinishRunParams) (bool, error) {
	return d.execOne(ctx, "run_finish", p.ID, p.Token.Name, p.Token.Owner, p.Token.Fence, p.Status, p.Result, p.Error, p.ExitCode)
}

// RunMarkLost marks a still-running run lost.
func (d *Driver) RunMarkLost(ctx context.Context, id, fence int64, reason string) (bool, error) {
	return d.execOne(ctx, "run_mark_lost", id, fence, reason)
}

// RunRefused ends an abandoned run now, once, with its worker's report.
func (d *Driver) RunRefused(ctx context.Context, id, fence int64, report string) (bool, error) {
	return d.execOne(ctx, "run_refused", id, fence, report)
}

// RunSweep marks running runs of invalid generations lost.
func (d *Driver) RunSweep(ctx context.Context) (int64, error) {
	res, err := d.db.ExecContext(ctx, d.q["run_sweep"])
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// RunPrune deletes finished runs older than the retention.
func (d *Driver) RunPrune(ctx context.Context, lease string, olderThanMs int64) (int64, error) {
	res, err := d.db.ExecContext(ctx, d.q["run_prune"], lease, olderThanMs)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// RunGet reads one run.
func (d *Driver) RunGet(ctx context.Context, id int64) (driver.Run, bool, error) {
	r, err := scanRun(d.db.QueryRowContext(ctx, d.q["run_get"], id))
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Run{}, false, nil
	}
	return r, err == nil, err
}

// RunList lists runs newest first.
func (d *Driver) RunList(ctx context.Context, f driver.RunFilter) ([]driver.Run, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := d.db.QueryContext(ctx, d.q["run_list"], f.Lease, f.Status, limit, max(f.Before, 0))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// IsRetryable reports SQLITE_BUSY and SQLITE_LOCKED (another writer held the
// lock past busy_timeout) as transient.
func (d *Driver) IsRetryable(err error) bool {
	var se *sqlitelib.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
	}
	return false
}

// IsServerError reports whether err came from SQLite itself, which means the
// statement did not commit. SQLite runs in process, so apart from context
// cancellation there is no in-between where a commit can be lost.
func (d *Driver) IsServerError(err error) bool {
	var se *sqlitelib.Error
	return errors.As(err, &se)
}

// DropTables drops fence's tables.
func (d *Driver) DropTables(ctx context.Context) error {
	_, err := d.db.ExecContext(ctx, d.q["drop"])
	return err
}

// writeOne runs a write statement with RETURNING in autocommit and scans its
// one row (sql.ErrNoRows when it changed nothing). It steps the statement
// to its end rather than reset it after the first row, so that the commit
// happens in a step and a failure of it is an error here.
func writeOne(ctx context.Context, st *sql.Stmt, args []any, dest ...any) error {
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	for rows.Next() {
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// execOne runs the prepared statement key, one autocommit statement, and
// reports whether it changed a row.
func (d *Driver) execOne(ctx context.Context, key string, args ...any) (bool, error) {
	st, err := d.stmt(ctx, key)
	if err != nil {
		return false, err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE through Open's
// _txlock), so that a transaction of several statements never has to
// upgrade a read snapshot to a write lock, which is what fails with
// SQLITE_BUSY_SNAPSHOT under contention. A single statement runs in
// autocommit instead: it asks for the write lock before it reads, and when
// the lock is busy SQLite's busy handler retries it from a fresh snapshot,
// so it waits (up to busy_timeout) rather than fail, and it saves the BEGIN
// and the COMMIT.
func (d *Driver) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

type scanner interface{ Scan(dest ...any) error }

func scanLease(s scanner) (driver.Lease, error) {
	var l driver.Lease
	err := s.Scan(&l.Name, &l.Owner, &l.Holder, &l.Fence, &l.State, &l.LeasedUntilMs, &l.AcquiredAtMs, &l.UpdatedAtMs, &l.NowMs)
	return l, err
}

func scanRun(s scanner) (driver.Run, error) {
	var r driver.Run
	var exit sql.NullInt64
	err := s.Scan(&r.ID, &r.Lease, &r.Owner, &r.Holder, &r.Fence, &r.Status, &r.StartedAtMs, &r.FinishedAtMs, &r.Result, &r.Error, &exit)
	if exit.Valid {
		r.ExitCode = &exit.Int64
	}
	return r, err
}

// NowSQL returns the database clock in milliseconds as an SQL expression.
func (d *Driver) NowSQL() string { return now }

// LeaseRaiseFences moves every fence below floor up to it and revokes those
// leases, in one write transaction: the rows read are the rows changed.
func (d *Driver) LeaseRaiseFences(ctx context.Context, floor int64) (int64, []driver.RaisedLease, error) {
	var raised []driver.RaisedLease
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		raised = raised[:0]
		// The UPDATE comes last but the SELECT must not run before this
		// transaction holds the write lock, or a writer could slip in
		// between; a handle from Open begins IMMEDIATE, and this
		// no-op write takes the lock on any other handle.
		if _, err := tx.ExecContext(ctx, d.q["lease_raise"], 0); err != nil {
			return err
		}
		if floor == 0 {
			if err := tx.QueryRowContext(ctx, d.q["lease_raise_floor"], floorArg()).Scan(&floor); err != nil {
				return err
			}
		}
		rows, err := tx.QueryContext(ctx, d.q["lease_raise_lock"], floor)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			l, err := scanLease(rows)
			if err != nil {
				return err
			}
			raised = append(raised, driver.RaisedLease{Lease: l, NewFence: floor})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		n, err := tx.ExecContext(ctx, d.q["lease_raise"], floor)
		if err != nil {
			return err
		}
		if c, err := n.RowsAffected(); err != nil || c != int64(len(raised)) {
			return fmt.Errorf("sqlite: raise changed %d rows (%v), read %d", c, err, len(raised))
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	for _, r := range raised {
		d.stmts.freed(r.Name, floor)
		d.released(ctx, r.Name)
	}
	return floor, raised, nil
}

// CheckSession verifies, on one connection of the driver's handle, the
// settings fence relies on, and returns a *driver.SettingError naming the
// setting and the fix for a wrong one:
//
//   - a journal: with journal_mode=OFF a rolled-back transaction (a fenced
//     transaction whose check failed) keeps its writes, and with MEMORY on a
//     file a crash mid-transaction leaves them half-written;
//   - synchronous FULL or EXTRA on a file: with NORMAL in WAL mode (and OFF
//     in any mode) a power loss can roll back commits fence already
//     reported, and hand a fence out twice.
//
// Not checked, because no pragma shows it: whether BEGIN takes the write lock
// (_txlock=immediate). A deferred transaction is still safe, only less
// patient: its first write after a read fails with SQLITE_BUSY (or
// SQLITE_BUSY_SNAPSHOT in WAL mode) when another writer committed in
// between, rather than waiting. Nor busy_timeout: without it writers fail
// with SQLITE_BUSY instead of queueing, which is an error, never a wrong
// answer. Open sets both.
func (d *Driver) CheckSession(ctx context.Context) error {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var file, mode string
	var sync int
	if err := c.QueryRowContext(ctx, d.q["check_session"]).Scan(&file, &mode, &sync); err != nil {
		return err
	}
	d.stmts.setFile(file)
	mode = strings.ToLower(mode)
	switch {
	case mode == "off":
		return &driver.SettingError{Msg: "sqlite: journal_mode is OFF: a rolled-back transaction would keep its writes; " +
			"use journal_mode(WAL) (_pragma=journal_mode(WAL) in the DSN) or open the store with fence.Open"}
	case file != "" && mode == "memory":
		return &driver.SettingError{Msg: "sqlite: journal_mode is MEMORY on a file: a crash mid-transaction leaves it half-written; " +
			"use journal_mode(WAL) (_pragma=journal_mode(WAL) in the DSN) or open the store with fence.Open"}
	case file != "" && sync < 2:
		return &driver.SettingError{Msg: fmt.Sprintf("sqlite: synchronous is %d (want 2, FULL): a power loss could roll back a reported acquisition "+
			"and hand its fence out again; use _pragma=synchronous(FULL) in the DSN or open the store with fence.Open", sync)}
	}
	return nil
}
