package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fencehttp"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/postgres"
	"github.com/fencekit/fence/task"
)

// The README's samples claim SQLite, PostgreSQL and MySQL: each runs here,
// word for word (example_readme_test.go), on each database it claims. A
// sample opens its store from a DSN with the default table prefix, so each
// gets a namespace of its own: a SQLite file, a PostgreSQL schema (through
// search_path), a MySQL database.

type namespace struct {
	name string
	dsn  string
	db   *sql.DB // on the namespace
}

func sampleCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eachNamespace runs f in a parallel subtest per database of dialects, on a
// fresh namespace of that database.
func eachNamespace(t *testing.T, dialects []fence.Dialect, f func(t *testing.T, ns namespace)) {
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			if ns, ok := newNamespace(t, d); ok {
				f(t, ns)
			}
		})
	}
}

func newNamespace(t *testing.T, d fence.Dialect) (namespace, bool) {
	ctx := sampleCtx(t)
	name := strings.TrimSuffix(testdb.Prefix(), "_")
	var dsn string
	switch d {
	case fence.SQLite:
		dsn = "sqlite:" + filepath.Join(t.TempDir(), "app.db")
	case fence.Postgres, fence.MySQL:
		base, env := testdb.PostgresDSN(), "FENCE_TEST_POSTGRES"
		create, drop := "CREATE SCHEMA "+name, "DROP SCHEMA "+name+" CASCADE"
		if d == fence.MySQL {
			base, env = testdb.MySQLDSN(), "FENCE_TEST_MYSQL"
			create, drop = "CREATE DATABASE "+name, "DROP DATABASE "+name
		}
		admin, err := fencedsn.Open(ctx, base)
		if err != nil {
			testdb.Unreachable(t, string(d), env, err)
			return namespace{}, false
		}
		t.Cleanup(func() { admin.Close() })
		if _, err := admin.DB().ExecContext(ctx, create); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := admin.DB().ExecContext(context.Background(), drop); err != nil {
				t.Errorf("%s: %v", drop, err)
			}
		})
		if d == fence.Postgres {
			sep := "?"
			if strings.Contains(base, "?") {
				sep = "&"
			}
			dsn = base + sep + "search_path=" + name
		} else {
			i := strings.LastIndex(base, "/")
			dsn = base[:i+1] + name
		}
	}
	s, err := fencedsn.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return namespace{name: string(d), dsn: dsn, db: s.DB()}, true
}

var allDialects = []fence.Dialect{fence.SQLite, fence.Postgres, fence.MySQL}

func execAll(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func itemOwner(t *testing.T, db *sql.DB) string {
	t.Helper()
	var owner string
	if err := db.QueryRow(`SELECT owner FROM items WHERE id = 1`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	return owner
}

// The README's main sample, and then its promise: the same statement with a
// token that lost the lease writes nothing. On a2d6cef the sample itself
// failed on PostgreSQL ("SQL uses placeholders up to $0 but 3 arguments
// were given").
func TestSampleAssign(t *testing.T) {
	eachNamespace(t, allDialects, func(t *testing.T, ns namespace) {
		ctx := sampleCtx(t)
		execAll(t, ns.db, `CREATE TABLE items (id INT PRIMARY KEY, owner VARCHAR(100) NOT NULL)`,
			`INSERT INTO items VALUES (1, '')`)
		res, err := assign(ctx, ns.dsn, 1, "alice")
		if err != nil || res.Outcome != fence.Completed {
			t.Fatalf("assign: %+v, %v", res, err)
		}
		if got := itemOwner(t, ns.db); got != "alice" {
			t.Fatalf("owner %q after the sample, want alice", got)
		}

		s, err := fencedsn.Open(ctx, ns.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		old, err := s.Acquire(ctx, "admin:reconciliation", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, old.Token); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, "admin:reconciliation", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		_, err = s.Exec(ctx, old.Token, `UPDATE items SET owner = ? WHERE id = ? AND {{fence}}`, "mallory", 1)
		if !errors.Is(err, fence.ErrLost) {
			t.Fatalf("stale write: %v, want ErrLost", err)
		}
		if got := itemOwner(t, ns.db); got != "alice" {
			t.Fatalf("owner %q after a stale write, want alice", got)
		}
	})
}

func TestSampleAssignPgx(t *testing.T) {
	eachNamespace(t, []fence.Dialect{fence.Postgres}, func(t *testing.T, ns namespace) {
		ctx := sampleCtx(t)
		execAll(t, ns.db, `CREATE TABLE items (id INT PRIMARY KEY, owner TEXT NOT NULL)`,
			`INSERT INTO items VALUES (1, '')`)
		pool, err := pgxpool.New(ctx, ns.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if err := assignPgx(ctx, pool, 1, "bob"); err != nil {
			t.Fatal(err)
		}
		if got := itemOwner(t, ns.db); got != "bob" {
			t.Fatalf("owner %q, want bob", got)
		}
		// The sample released its lease: a second replica can take it at once.
		if err := assignPgx(ctx, pool, 1, "carol"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSampleOpenPostgres(t *testing.T) {
	eachNamespace(t, []fence.Dialect{fence.Postgres}, func(t *testing.T, ns namespace) {
		ctx := sampleCtx(t)
		db, err := postgres.Open(ns.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		store, err := openPostgres(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if store.Dialect() != fence.Postgres || store.DB() != db {
			t.Fatalf("store over %s, DB %p; want postgres over %p", store.Dialect(), store.DB(), db)
		}
		if _, err := store.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := store.Acquire(ctx, "admin:reconciliation", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Release(ctx, l.Token); err != nil {
			t.Fatal(err)
		}
		// The caller's handle outlives the store.
		store.Close()
		if err := db.PingContext(ctx); err != nil {
			t.Fatalf("store.Close closed the caller's handle: %v", err)
		}
	})
}

func TestSampleReplan(t *testing.T) {
	eachNamespace(t, allDialects, func(t *testing.T, ns namespace) {
		ctx := sampleCtx(t)
		s, err := fencedsn.Open(ctx, ns.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := replan(ctx, s); err != nil {
			t.Fatal(err)
		}
		ts, err := task.New(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ts.Get(ctx, "t-42")
		if err != nil {
			t.Fatal(err)
		}
		if got.State != task.Succeeded || got.Plan.Model != "large" {
			t.Fatalf("task after the sample: %+v", got)
		}
		steps, err := ts.Steps(ctx, "t-42")
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) != 1 {
			t.Fatalf("%d steps recorded, want 1 (the old plan's late step must be refused): %+v", len(steps), steps)
		}
	})
}

// The fencehttp sample on PostgreSQL, which its receiver claims; then a
// request signed with the first run's (now older) fence is refused and
// writes nothing.
func TestSamplePublish(t *testing.T) {
	eachNamespace(t, []fence.Dialect{fence.Postgres}, func(t *testing.T, ns namespace) {
		ctx := sampleCtx(t)
		execAll(t, ns.db, `CREATE TABLE feed (body TEXT NOT NULL)`, `INSERT INTO feed VALUES ('')`)
		key := []byte(strings.Repeat("k", fencehttp.MinKeyLen))
		mux, err := receiver(ctx, ns.db, key)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mux)
		defer srv.Close()
		s, err := fencedsn.Open(ctx, ns.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		first, err := publish(ctx, s, key, srv.URL+"/publish")
		if err != nil || first.Outcome != fence.Completed {
			t.Fatalf("publish: %+v, %v", first, err)
		}
		if second, err := publish(ctx, s, key, srv.URL+"/publish"); err != nil || second.Outcome != fence.Completed {
			t.Fatalf("second publish: %+v, %v", second, err)
		}
		execAll(t, ns.db, `UPDATE feed SET body = ''`)

		h, err := fencehttp.Sign(key, first.Token)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/publish", strings.NewReader("stale"))
		req.Header.Set(fencehttp.HeaderFence, h)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var body string
		if err := ns.db.QueryRow(`SELECT body FROM feed`).Scan(&body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusPreconditionFailed || body != "" {
			t.Fatalf("stale request: status %d, feed %q; want 412 and nothing written", resp.StatusCode, body)
		}
	})
}

func TestSampleObserved(t *testing.T) {
	eachNamespace(t, allDialects, func(t *testing.T, ns namespace) {
		reg := prometheus.NewRegistry()
		res, err := observed(sampleCtx(t), ns.dsn, reg, func(ctx context.Context) error { return nil })
		if err != nil || res.Outcome != fence.Completed {
			t.Fatalf("observed: %+v, %v", res, err)
		}
		if n := gathered(reg, "fence_run_starts_total"); n != 1 {
			t.Fatalf("fence_run_starts_total sums to %v, want 1", n)
		}
		if n := gathered(reg, "fence_runs_finished_total"); n != 1 {
			t.Fatalf("fence_runs_finished_total sums to %v, want 1 (succeeded)", n)
		}
	})
}

// The README's leader-election sample on each database, with two
// replicas: the first leads and writes; when it stops, it releases the
// lease and the second takes over at once (the TTL is 15 s) and writes.
func TestSampleLeadReports(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	eachNamespace(t, allDialects, func(t *testing.T, ns namespace) {
		ctx := sampleCtx(t)
		execAll(t, ns.db, `CREATE TABLE reports (id INT PRIMARY KEY, body VARCHAR(100) NOT NULL, author VARCHAR(100) NOT NULL)`,
			`INSERT INTO reports VALUES (1, '', '')`)
		replica := func(me string) (stop func() error) {
			s, err := fencedsn.Open(ctx, ns.dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- leadReports(rctx, s, me, func() string { return "by " + me }) }()
			t.Cleanup(cancel)
			return func() error { cancel(); return <-done }
		}
		waitAuthor := func(want string) {
			t.Helper()
			var author string
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if err := ns.db.QueryRowContext(ctx, `SELECT author FROM reports WHERE id = 1`).Scan(&author); err != nil {
					t.Fatal(err)
				}
				if author == want {
					return
				}
			}
			t.Fatalf("report author %q after 30s, want %q", author, want)
		}
		stop1 := replica("replica-1")
		waitAuthor("replica-1")
		stop2 := replica("replica-2")
		stopped := time.Now()
		if err := stop1(); !errors.Is(err, context.Canceled) {
			t.Fatalf("replica-1's Elect returned %v", err)
		}
		waitAuthor("replica-2")
		if d := time.Since(stopped); d > 10*time.Second {
			t.Errorf("replica-2 wrote %v after replica-1 stopped; the release should spare the 15s TTL", d)
		}
		if err := stop2(); !errors.Is(err, context.Canceled) {
			t.Fatalf("replica-2's Elect returned %v", err)
		}
	})
}
