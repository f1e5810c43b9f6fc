package fencegocron_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/testdb"
)

// The package doc's sample (scheduleReport, example_test.go) on PostgreSQL
// and MySQL, where its "?" placeholder used to be refused
// (a2d6cef: "SQL uses placeholders up to $0 but … arguments were given").
// The sample writes to an unprefixed table, so it runs in a schema or
// database of its own.
func TestDocSampleScheduleReport(t *testing.T) {
	for _, d := range []fence.Dialect{fence.Postgres, fence.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			store := namespaceStore(t, ctx, d)
			for _, q := range []string{
				`CREATE TABLE reports (id INT PRIMARY KEY, body VARCHAR(100) NOT NULL)`,
				`INSERT INTO reports VALUES (1, '')`,
			} {
				if _, err := store.DB().ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			sched, err := scheduleReport(store, "all good")
			if err != nil {
				t.Fatal(err)
			}
			defer sched.Shutdown()
			if err := sched.Jobs()[0].RunNow(); err != nil {
				t.Fatal(err)
			}
			var body string
			for body == "" {
				if err := store.DB().QueryRowContext(ctx, `SELECT body FROM reports WHERE id = 1`).Scan(&body); err != nil {
					t.Fatalf("waiting for the job's write: %v", err)
				}
				select {
				case <-ctx.Done():
					t.Fatal("the job's fenced write never landed")
				case <-time.After(10 * time.Millisecond):
				}
			}
			if body != "all good" {
				t.Fatalf("report %q", body)
			}
		})
	}
}

// namespaceStore opens a migrated store, default prefix, in a fresh
// PostgreSQL schema (through search_path) or MySQL database, dropped at the
// end of t.
func namespaceStore(t *testing.T, ctx context.Context, d fence.Dialect) *fence.Store {
	name := strings.TrimSuffix(testdb.Prefix(), "_")
	base, env := testdb.PostgresDSN(), "FENCE_TEST_POSTGRES"
	create, drop := "CREATE SCHEMA "+name, "DROP SCHEMA "+name+" CASCADE"
	if d == fence.MySQL {
		base, env = testdb.MySQLDSN(), "FENCE_TEST_MYSQL"
		create, drop = "CREATE DATABASE "+name, "DROP DATABASE "+name
	}
	admin, err := fencedsn.Open(ctx, base)
	if err != nil {
		testdb.Unreachable(t, string(d), env, err)
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
	dsn := base[:strings.LastIndex(base, "/")+1] + name
	if d == fence.Postgres {
		sep := "?"
		if strings.Contains(base, "?") {
			sep = "&"
		}
		dsn = base + sep + "search_path=" + name
	}
	s, err := fencedsn.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}
