// Package teststore opens a migrated fence store on each database the tests
// run against (SQLite in a temp dir, PostgreSQL, MySQL/MariaDB), on fresh
// tables that are dropped at cleanup. It follows testdb's rules: an
// unreachable database skips, or fails under FENCE_REQUIRE_DBS=1.
package teststore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
)

// Backend is one database to run a test on.
type Backend struct {
	Name string
	env  string
	dsn  func(t testing.TB) string
}

// Backends lists SQLite, PostgreSQL and MySQL.
var Backends = []Backend{
	{"sqlite", "", func(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "fence.db") }},
	{"postgres", "FENCE_TEST_POSTGRES", func(testing.TB) string { return testdb.PostgresDSN() }},
	{"mysql", "FENCE_TEST_MYSQL", func(testing.TB) string { return testdb.MySQLDSN() }},
}

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
	ctx := context.Background()
	dsn := b.dsn(t)
	s, err := fence.Open(ctx, dsn, append([]fence.Option{fence.WithPrefix(testdb.Prefix())}, opts...)...)
	if errors.Is(err, fence.ErrUnavailable) {
		testdb.Unreachable(t, b.Name, b.env, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.DropTables(context.Background())
		s.Close()
	})
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s, dsn
}

// Each runs fn as a parallel subtest per backend.
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	for _, b := range Backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}
