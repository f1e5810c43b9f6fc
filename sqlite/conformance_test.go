package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencetest"
)

// Each prefix gets its own database file, so re-opening a prefix is a
// restart of the same database and parallel cases do not share a write lock.
func TestConformance(t *testing.T) {
	dir := t.TempDir()
	fencetest.Run(t, fencetest.Backend{
		Name: "sqlite",
		Open: func(t testing.TB, prefix string, opts ...fence.Option) *fence.Store {
			ctx := context.Background()
			s, err := fence.Open(ctx, "sqlite:"+filepath.Join(dir, prefix+".db"), append([]fence.Option{fence.WithPrefix(prefix)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	})
}
