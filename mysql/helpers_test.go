package mysql

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/testdb"
)

// handle says how a test's *sql.DB was made: by Open, or by a user who
// passed go-sql-driver's defaults (no clientFoundRows, server-side prepared
// statements, the server's time zone). The driver must behave the same on
// both.
type handle string

const (
	viaOpen  handle = "open"
	viaPlain handle = "plain"
)

var handles = []handle{viaOpen, viaPlain}

var (
	reachOnce sync.Once
	reachErr  error
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openDB returns a fresh pool to the test server, or skips t.
func openDB(t testing.TB, h handle) *sql.DB {
	t.Helper()
	reachOnce.Do(func() {
		db, err := Open(testdb.MySQLDSN())
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = db.PingContext(ctx)
			cancel()
			db.Close()
		}
		reachErr = err
	})
	if reachErr != nil {
		testdb.Unreachable(t, "mysql", "FENCE_TEST_MYSQL", reachErr)
	}
	var db *sql.DB
	switch h {
	case viaOpen:
		var err error
		if db, err = Open(testdb.MySQLDSN()); err != nil {
			t.Fatal(err)
		}
	case viaPlain:
		cfg, err := parseURL(testdb.MySQLDSN())
		if err != nil {
			t.Fatal(err)
		}
		plain := gomysql.NewConfig()
		plain.User, plain.Passwd, plain.Net, plain.Addr, plain.DBName = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName
		c, err := gomysql.NewConnector(plain)
		if err != nil {
			t.Fatal(err)
		}
		db = sql.OpenDB(c)
	default:
		t.Fatalf("unknown handle %q", h)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openWithSession returns a pool to the test server, as Open makes it, whose
// sessions also run SET name = value (value is SQL, as go-sql-driver sends
// it): a handle with a setting a careless user could have given it.
func openWithSession(t testing.TB, name, value string) *sql.DB {
	t.Helper()
	openDB(t, viaOpen) // skips when the server is unreachable
	cfg, err := parseURL(testdb.MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params[name] = value
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db
}

// newDriver returns a migrated driver on fresh tables that are dropped when
// the test ends.
func newDriver(t testing.TB, h handle) *Driver {
	t.Helper()
	db := openDB(t, h)
	d, err := New(db, testdb.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.DropTables(context.Background()); err != nil {
			t.Errorf("drop tables: %v", err)
		}
	})
	if _, err := d.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return d
}

// forEachHandle runs fn as a subtest on a driver of each handle kind.
func forEachHandle(t *testing.T, fn func(t *testing.T, d *Driver)) {
	for _, h := range handles {
		t.Run(string(h), func(t *testing.T) {
			t.Parallel()
			fn(t, newDriver(t, h))
		})
	}
}

func mustAcquire(t testing.TB, d *Driver, name, owner string, ttlMs int64) driver.TokenParams {
	t.Helper()
	r, err := d.LeaseAcquire(ctxT(t), driver.AcquireParams{Name: name, Owner: owner, TTLMs: ttlMs})
	if err != nil {
		t.Fatalf("acquire %q by %s: %v", name, owner, err)
	}
	if !r.Acquired {
		t.Fatalf("acquire %q by %s: held by %+v", name, owner, r.Holder)
	}
	return driver.TokenParams{Name: name, Owner: owner, Fence: r.Fence}
}

// sessionConn returns a connection whose session uses isolation level iso
// ("REPEATABLE READ" or "READ COMMITTED") and a short lock wait timeout.
func sessionConn(t testing.TB, db *sql.DB, iso string, lockWaitSec int) *sql.Conn {
	t.Helper()
	ctx := ctxT(t)
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, q := range []string{
		"SET SESSION TRANSACTION ISOLATION LEVEL " + iso,
		"SET SESSION innodb_lock_wait_timeout = " + strconv.Itoa(lockWaitSec),
	} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

var isolations = []string{"REPEATABLE READ", "READ COMMITTED"}

// waitRunning waits until the server shows a statement containing every one
// of parts running (in PROCESSLIST), then a little longer, so that a test
// knows the statement has started, and is blocked if it is going to be,
// before it goes on. Under load a goroutine's statement can start late.
func waitRunning(t testing.TB, db *sql.DB, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !running(t, db, parts...) {
		if time.Now().After(deadline) {
			t.Fatalf("no statement with %q ever ran", parts)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
}

// running reports whether a statement containing every one of parts is
// running now.
func running(t testing.TB, db *sql.DB, parts ...string) bool {
	t.Helper()
	// Not this query itself, whose text holds the patterns.
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID()"
	args := []any{}
	for _, p := range parts {
		q += " AND INFO LIKE ?"
		args = append(args, "%"+p+"%")
	}
	var n int
	if err := db.QueryRowContext(ctxT(t), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}
