package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/testdb"
)

// openDB opens a pool on the test database, or skips (fails, with
// FENCE_REQUIRE_DBS=1) when it is unreachable.
func openDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := Open(testdb.PostgresDSN())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		testdb.Unreachable(t, "postgres", "FENCE_TEST_POSTGRES", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// newDriver returns a migrated driver on fresh tables, dropped at cleanup.
func newDriver(t testing.TB) *Driver {
	t.Helper()
	d := newDriverPrefix(t, testdb.Prefix())
	if _, err := d.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return d
}

// newDriverPrefix returns an unmigrated driver; its tables are dropped at
// cleanup.
func newDriverPrefix(t testing.TB, prefix string) *Driver {
	t.Helper()
	d, err := New(openDB(t), prefix)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := d.DropTables(context.Background()); err != nil {
			t.Errorf("DropTables: %v", err)
		}
	})
	return d
}

// soloDriver is a second driver on d's tables over a one-connection pool, and
// that connection's backend pid, so a test can watch it wait for a lock.
func soloDriver(t testing.TB, d *Driver) (*Driver, int) {
	t.Helper()
	db := openDB(t)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	var pid int
	if err := db.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	s, err := New(db, d.prefix)
	if err != nil {
		t.Fatal(err)
	}
	return s, pid
}

// waitingTokenOp starts a release of tok (or, with release false, a renew
// for 60 s) on a driver with a connection of its own, and returns once that
// statement waits for a row lock; result waits for it to finish and gives
// its outcome.
func waitingTokenOp(ctx context.Context, t testing.TB, d *Driver, tok driver.TokenParams, release bool) (result func() (bool, error)) {
	t.Helper()
	return waitingOp(t, d, func(solo *Driver) (bool, error) {
		if release {
			return solo.LeaseRelease(ctx, tok)
		}
		r, err := solo.LeaseRenew(ctx, tok, 60_000)
		return r.Renewed, err
	})
}

// waitingOp runs op on a driver with a connection of its own, and returns
// once op's statement waits for a row lock; result waits for op to finish
// and gives its outcome.
func waitingOp(t testing.TB, d *Driver, op func(solo *Driver) (bool, error)) (result func() (bool, error)) {
	t.Helper()
	solo, pid := soloDriver(t, d)
	done := make(chan struct{})
	var ok bool
	var err error
	go func() {
		defer close(done)
		ok, err = op(solo)
	}()
	waitLocked(t, d.db, pid)
	return func() (bool, error) {
		<-done
		return ok, err
	}
}

// outlastVerdict lets the database clock move on while a renew or release
// waits for the row: past leasedUntil (pastExpiry), or into a later
// millisecond than the statement's verdict, so that its re-check after the
// wait reads the row again.
func outlastVerdict(t testing.TB, d *Driver, pastExpiry bool, leasedUntil int64) {
	t.Helper()
	if pastExpiry {
		for now(t, d) <= leasedUntil {
			time.Sleep(20 * time.Millisecond)
		}
		return
	}
	for start := now(t, d); now(t, d) <= start+1; {
		time.Sleep(time.Millisecond)
	}
}

// waitLocked waits until backend pid is waiting for a lock.
func waitLocked(t testing.TB, db *sql.DB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var waiting bool
		err := db.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`, pid).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("backend %d never waited for a lock", pid)
}

// stillRunning fails t if done is closed within d: the operation behind it
// should be blocked.
func stillRunning(t testing.TB, done <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-done:
		t.Fatalf("%s finished, but it should wait for the lock", what)
	case <-time.After(d):
	}
}

func owner(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func acquire(t testing.TB, d *Driver, name string, ttl time.Duration) driver.TokenParams {
	t.Helper()
	o := owner(t)
	r, err := d.LeaseAcquire(context.Background(), driver.AcquireParams{Name: name, Owner: o, TTLMs: ttl.Milliseconds()})
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	if !r.Acquired {
		t.Fatalf("acquire %q: not acquired (holder %+v)", name, r.Holder)
	}
	return driver.TokenParams{Name: name, Owner: o, Fence: r.Fence}
}

func mustGet(t testing.TB, d *Driver, name string) driver.Lease {
	t.Helper()
	l, ok, err := d.LeaseGet(context.Background(), name)
	if err != nil || !ok {
		t.Fatalf("LeaseGet %q: ok=%v err=%v", name, ok, err)
	}
	return l
}

// execT runs SQL with the prefix substituted, for test fixtures.
func (d *Driver) execT(t testing.TB, query string, args ...any) sql.Result {
	t.Helper()
	q := d.render(t, query)
	res, err := d.db.Exec(q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return res
}

func (d *Driver) queryRowT(t testing.TB, query string, args ...any) *sql.Row {
	t.Helper()
	return d.db.QueryRow(d.render(t, query), args...)
}

// render substitutes {{prefix}} and {{now_ms}} in a test's own SQL.
func (d *Driver) render(t testing.TB, query string) string {
	t.Helper()
	nowMs, err := fragment("now_ms")
	if err != nil {
		t.Fatal(err)
	}
	q, err := expand(query, d.prefix, nowMs)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func tokenParams(name, owner string, fence int64) driver.TokenParams {
	return driver.TokenParams{Name: name, Owner: owner, Fence: fence}
}

// acquireLocked acquires name for ttl and, in a new transaction, takes the
// fenced transaction's share lock on it (LockTx). A loaded machine can take
// longer than a short TTL between the two: when the lease lapsed first, it
// is acquired again with twice the TTL. It returns the token, the open
// transaction (rolled back at cleanup) and the lease's expiry, database ms.
func acquireLocked(t testing.TB, d *Driver, name string, ttl time.Duration) (driver.TokenParams, *sql.Tx, int64) {
	t.Helper()
	ctx := context.Background()
	for ; ; ttl *= 2 {
		tok := acquire(t, d, name, ttl)
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := d.LockTx(ctx, tx, tok)
		if err != nil {
			t.Fatalf("LockTx: %v", err)
		}
		if ok {
			t.Cleanup(func() { tx.Rollback() })
			return tok, tx, mustGet(t, d, name).LeasedUntilMs
		}
		tx.Rollback()
		if ttl >= time.Minute {
			t.Fatalf("LockTx: the lease lapsed before the lock at every TTL up to %v", ttl)
		}
	}
}

// waitDBPast waits until the database clock reads ms or later: a lease
// leased until ms has lapsed then.
func waitDBPast(t testing.TB, d *Driver, ms int64) {
	t.Helper()
	for {
		n := now(t, d)
		if n >= ms {
			return
		}
		time.Sleep(time.Duration(ms-n+1) * time.Millisecond)
	}
}

// expireNow ends name's lease at the database's now, as its TTL would:
// tests use a long TTL and this, instead of a short TTL that a loaded
// machine can outlast before the lease was used.
func expireNow(t testing.TB, d *Driver, name string) {
	t.Helper()
	d.execT(t, `UPDATE {{prefix}}leases SET leased_until_ms = $1 WHERE lease_name = $2`, now(t, d), name)
}
