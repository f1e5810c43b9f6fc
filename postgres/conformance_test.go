package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencetest"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/postgres"
)

func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Backend{
		Name: "postgres",
		Open: func(t testing.TB, prefix string, opts ...fence.Option) *fence.Store {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db, err := postgres.Open(testdb.PostgresDSN())
			if err != nil {
				t.Fatal(err)
			}
			if err := db.PingContext(ctx); err != nil {
				db.Close()
				testdb.Unreachable(t, "postgres", "FENCE_TEST_POSTGRES", err)
			}
			s, err := fence.OpenDB(db, fence.Postgres, append([]fence.Option{fence.WithPrefix(prefix)}, opts...)...)
			if err != nil {
				db.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() {
				s.Close()
				db.Close()
				dropTables(t, prefix)
			})
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

// TestConformancePgx runs the suite on the pgx-native store: fence.OpenPool
// over a pgxpool, and the cases' own SQL, transactions and fenced writes
// through pgx (ExecPgx, InPgxTx, CheckPgxTx, ExecResourcePgx).
func TestConformancePgx(t *testing.T) {
	fencetest.Run(t, fencetest.Backend{
		Name: "postgres-pgx",
		Open: func(t testing.TB, prefix string, opts ...fence.Option) *fence.Store {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg, err := postgres.NewPoolConfig(testdb.PostgresDSN())
			if err != nil {
				t.Fatal(err)
			}
			// A pool per store: the suite re-opens stores on one prefix, and a
			// case may close its store's pool to take the database away.
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := pool.Ping(ctx); err != nil {
				pool.Close()
				testdb.Unreachable(t, "postgres", "FENCE_TEST_POSTGRES", err)
			}
			s, err := fence.OpenPool(pool, append([]fence.Option{fence.WithPrefix(prefix)}, opts...)...)
			if err != nil {
				pool.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() {
				s.Close()
				pool.Close()
				dropTables(t, prefix)
			})
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

// dropTables drops prefix's tables over a pool of its own: some cases close
// the store's handle to simulate losing the database. Every store on a prefix
// drops them; the second drop is a no-op.
func dropTables(t testing.TB, prefix string) {
	db, err := postgres.Open(testdb.PostgresDSN())
	if err != nil {
		t.Error(err)
		return
	}
	defer db.Close()
	d, err := postgres.New(db, prefix)
	if err == nil {
		err = d.DropTables(context.Background())
	}
	if err != nil {
		t.Errorf("drop tables of %s: %v", prefix, err)
	}
}
