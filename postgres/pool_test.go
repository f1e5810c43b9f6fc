package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/testdb"
)

// The pgx-native driver runs the same statements as the database/sql one;
// the conformance suite (TestConformancePgx) covers their semantics. These
// tests cover what differs: the pool's sessions for the handoff hub, and how
// pgx's own errors are classified.

// openPool returns a pool on the test database, or skips (fails under
// FENCE_REQUIRE_DBS=1) when it is unreachable. Cleanup closes it unless the
// test did.
func openPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := NewPoolConfig(testdb.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		p.Close()
		testdb.Unreachable(t, "postgres", "FENCE_TEST_POSTGRES", err)
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(p.Close) })
	return p
}

// newPoolDriver returns a migrated pgx-native driver on fresh tables.
func newPoolDriver(t testing.TB) *Driver {
	t.Helper()
	d, err := NewPool(openPool(t), testdb.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Over a pool of its own: a test may have closed d's.
		c, err := NewPool(openPool(t), d.prefix)
		if err == nil {
			err = c.DropTables(context.Background())
		}
		if err != nil {
			t.Errorf("DropTables: %v", err)
		}
	})
	return d
}

func TestNewPoolRefusesBadInput(t *testing.T) {
	if _, err := NewPool(nil, "p_"); err == nil {
		t.Error("NewPool(nil) succeeded")
	}
	p := openPool(t)
	if _, err := NewPool(p, "x; DROP TABLE y"); err == nil {
		t.Error("NewPool accepted a prefix that is not an identifier")
	}
	d, err := NewPool(p, "p_")
	if err != nil {
		t.Fatal(err)
	}
	if d.DB() != nil || d.Pool() != p {
		t.Errorf("NewPool driver: DB %v, Pool %v", d.DB(), d.Pool())
	}
}

func TestNewPoolConfigRedactsPassword(t *testing.T) {
	const secret = "s3cr3t-Pw"
	for _, dsn := range []string{
		"postgres://u:" + secret + "@127.0.0.1:notaport/db",
		"postgresql://u:" + secret + "@127.0.0.1:5432/db?pool_max_conns=many",
		"postgres://u@h:5432/db?password=" + secret + "&sslmode=bogus",
		"mysql://u:" + secret + "@h/db",
	} {
		_, err := NewPoolConfig(dsn)
		if err == nil {
			t.Errorf("NewPoolConfig(%q) succeeded", dsn)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("NewPoolConfig error leaks the password: %v", err)
		}
		var pce *pgconn.ParseConfigError
		if errors.As(err, &pce) {
			t.Errorf("NewPoolConfig wraps pgx's ParseConfigError, which holds the DSN: %v", err)
		}
	}
	cfg, err := NewPoolConfig("POSTGRESQL://u:pw@127.0.0.1:5432/db?pool_max_conns=3")
	if err != nil || cfg.MaxConns != 3 {
		t.Fatalf("upper-case scheme with pool_max_conns: %v, %+v", err, cfg)
	}
}

func TestPoolWatchReleaseWakes(t *testing.T) {
	d := newPoolDriver(t)
	w, err := NewPool(openPool(t), d.prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tok := acquire(t, d, "job", time.Hour)
	wake, stop := w.WatchRelease(ctx, "job")
	defer stop()
	if woken(wake, 100*time.Millisecond) {
		t.Fatal("woken before any release")
	}
	start := time.Now()
	if ok, err := d.LeaseRelease(ctx, tok); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !woken(wake, 5*time.Second) {
		t.Fatal("release did not wake the watcher")
	}
	t.Logf("release -> wake %v", time.Since(start))
	acquire(t, d, "job", time.Hour)
	if _, ok, err := d.LeaseRevoke(ctx, "job"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !woken(wake, 5*time.Second) {
		t.Fatal("revoke did not wake the watcher")
	}
}

// The hub's two sessions are hijacked from the pool: they do not count
// against its size, and closing the pool does not wait for them.
func TestPoolHubDoesNotHoldPoolConnections(t *testing.T) {
	d := newPoolDriver(t)
	cfg, err := NewPoolConfig(testdb.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewPool(p, d.prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, stop := w.WatchRelease(ctx, "job")
	defer stop()
	w.h.mu.Lock()
	up := w.h.up
	w.h.mu.Unlock()
	if !up {
		t.Fatal("hub did not start")
	}
	// With MaxConns 1, a statement can only run if the hub holds none of
	// the pool's connections.
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := w.Now(qctx); err != nil {
		t.Fatalf("statement on a one-connection pool while the hub is up: %v", err)
	}
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("pool.Close waited for the hub's sessions")
	}
}

// pgx-native errors are classified as the stdlib ones are: a server error
// is definite, a connection cut after the statement was sent is not, a
// refused connection is definite and retryable.
func TestPoolErrorClassification(t *testing.T) {
	d := newPoolDriver(t)
	ctx := context.Background()

	_, err := d.c.exec(ctx, "SELECT 1/0")
	if err == nil || !d.IsServerError(err) || d.IsRetryable(err) {
		t.Errorf("division by zero: %v (definite %v, retryable %v)", err, d.IsServerError(err), d.IsRetryable(err))
	}

	// A statement whose reply never comes before the caller gives up: pgx
	// cancels it and closes the connection, and the outcome is unknown.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = d.c.exec(cctx, "SELECT pg_sleep(5)")
	if err == nil || d.IsServerError(err) {
		t.Errorf("statement cut off by the caller's deadline: %v (definite %v; want not definite)", err, d.IsServerError(err))
	}

	cfg, err := NewPoolConfig("postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	refused, err := NewPool(p, "p_")
	if err != nil {
		t.Fatal(err)
	}
	_, err = refused.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: "o", TTLMs: 1000})
	if err == nil || !refused.IsServerError(err) || !refused.IsRetryable(err) {
		t.Errorf("connection refused: %v (definite %v, retryable %v; want both)", err, refused.IsServerError(err), refused.IsRetryable(err))
	}
}

// Two pgx-native drivers migrating at once serialise on the advisory lock.
func TestPoolMigrateConcurrently(t *testing.T) {
	prefix := testdb.Prefix()
	var wg sync.WaitGroup
	versions := make([]int, 4)
	errs := make([]error, 4)
	for i := range versions {
		d, err := NewPool(openPool(t), prefix)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			versions[i], errs[i] = d.Migrate(context.Background())
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		d, _ := NewPool(openPool(t), prefix)
		if err := d.DropTables(context.Background()); err != nil {
			t.Error(err)
		}
	})
	for i := range versions {
		if errs[i] != nil || versions[i] != versions[0] || versions[0] < 2 {
			t.Errorf("migrate %d: version %d, %v", i, versions[i], errs[i])
		}
	}
}
