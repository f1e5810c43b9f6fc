// Package teststore opens a migrated fence store on each database the tests
// run against (SQLite in a temp dir, PostgreSQL, MySQL/MariaDB), on fresh
// tables that are dropped at cleanup. It follows testdb's rules: an
// unreachable database skips, or fails under FENCE_REQUIRE_DBS=1.
package teststore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/postgres"
)

// Backend is one database to run a test on.
type Backend struct {
	Name string
	env  string
	dsn  func(t testing.TB) string
	pgx  bool // a store over pgx's own pool (postgres.NewPool), not database/sql
}

// The databases, each through database/sql.
var (
	SQLite   = Backend{Name: "sqlite", dsn: func(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "fence.db") }}
	Postgres = Backend{Name: "postgres", env: "FENCE_TEST_POSTGRES", dsn: func(testing.TB) string { return testdb.PostgresDSN() }}
	MySQL    = Backend{Name: "mysql", env: "FENCE_TEST_MYSQL", dsn: func(testing.TB) string { return testdb.MySQLDSN() }}
)

// Galera is a MariaDB Galera cluster given by FENCE_TEST_GALERA (its node
// DSNs). Each store opens on the next node in turn, so a case's stores are
// spread over the nodes, with wsrep_sync_wait=7 so that one sees what
// another committed through another node first, as on one server. Without
// FENCE_TEST_GALERA a test on it skips, even under FENCE_REQUIRE_DBS=1.
var Galera = Backend{Name: "galera", env: "FENCE_TEST_GALERA", dsn: func(t testing.TB) string {
	dsns := testdb.GaleraDSNs()
	if len(dsns) == 0 {
		t.Skip("SKIP galera suite: set FENCE_TEST_GALERA to the node DSNs of a Galera cluster (clusters/galera/galera.sh)")
	}
	dsn := dsns[int(galeraNext.Add(1))%len(dsns)]
	if strings.Contains(dsn, "?") {
		return dsn + "&wsrep_sync_wait=7"
	}
	return dsn + "?wsrep_sync_wait=7"
}}

var galeraNext atomic.Uint32

// Backends lists SQLite, PostgreSQL and MySQL.
var Backends = []Backend{SQLite, Postgres, MySQL}

// Pgx is PostgreSQL through the pgx-native store (postgres.NewPool). It is
// not in Backends, because tests that run their own SQL through s.DB() need
// a database/sql handle; a test that only uses the store's API runs on it
// with WithPgx.
var Pgx = Backend{Name: "postgres-pgx", env: "FENCE_TEST_POSTGRES", dsn: func(testing.TB) string { return testdb.PostgresDSN() }, pgx: true}

// WithPgx is Backends and Pgx.
func WithPgx() []Backend { return append(slices.Clone(Backends), Pgx) }

// Open returns a migrated store with a fresh prefix; its tables are dropped
// and it is closed at cleanup.
func (b Backend) Open(t testing.TB, opts ...fence.Option) *fence.Store {
	t.Helper()
	s, _ := b.OpenDSN(t, opts...)
	return s
}

// OpenDSN is Open that also returns the DSN, for a child process that must
// reach the same database (with s.Prefix()).
func (b Backend) OpenDSN(t testing.TB, opts ...fence.Option) (*fence.Store, string) {
	t.Helper()
	dsn := b.dsn(t)
	s := b.open(t, dsn, append([]fence.Option{fence.WithPrefix(testdb.Prefix())}, opts...))
	t.Cleanup(func() {
		s.DropTables(context.Background())
		s.Close()
	})
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, dsn
}

// openPool is fencedsn.Open for the pgx-native store. The store does not own
// the pool, so the caller closes it.
func openPool(ctx context.Context, dsn string, opts []fence.Option) (*fence.Store, *pgxpool.Pool, error) {
	cfg, err := postgres.NewPoolConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, nil, fmt.Errorf("%w: %v", fence.ErrUnavailable, err)
	}
	d, err := postgres.NewPool(p, "")
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	s, err := fence.New(ctx, d, opts...)
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	return s, p, nil
}

// Each runs fn as a parallel subtest per backend of Backends.
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	EachOf(t, Backends, fn)
}

// EachOf runs fn as a parallel subtest per backend of bs.
func EachOf(t *testing.T, bs []Backend, fn func(t *testing.T, b Backend)) {
	for _, b := range bs {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}
