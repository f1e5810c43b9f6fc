package teststore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fencetest"
	"github.com/fencekit/fence/internal/testdb"
)

// Conformance is b as a backend of the conformance suite. Each Open is a
// migrated store on the case's prefix over a handle of its own (a
// database/sql pool, or a pgxpool for Pgx), as a separate process would
// have; re-opening a prefix reaches the same tables, and on SQLite the same
// file, one per prefix, so parallel cases do not share a write lock. At
// cleanup the store is closed and its tables dropped through a store of
// their own, because some cases close the store's handle to take the
// database away (every store on a prefix drops them; the second is a no-op).
func (b Backend) Conformance(t *testing.T) fencetest.Backend {
	dir := t.TempDir()
	dsn := func(t testing.TB, prefix string) string {
		if b.Name == "sqlite" {
			return "sqlite:" + filepath.Join(dir, prefix+".db")
		}
		return b.dsn(t)
	}
	return fencetest.Backend{
		Name: b.Name,
		Open: func(t testing.TB, prefix string, opts ...fence.Option) *fence.Store {
			t.Helper()
			s := b.open(t, dsn(t, prefix), append([]fence.Option{fence.WithPrefix(prefix)}, opts...))
			t.Cleanup(func() {
				s.Close()
				d := b.open(t, dsn(t, prefix), []fence.Option{fence.WithPrefix(prefix)})
				defer d.Close()
				if err := d.DropTables(context.Background()); err != nil {
					t.Errorf("drop tables of %s: %v", prefix, err)
				}
			})
			if _, err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// open returns a store on dsn, unmigrated; the pool of a Pgx store is
// closed at cleanup, after the store.
func (b Backend) open(t testing.TB, dsn string, opts []fence.Option) *fence.Store {
	t.Helper()
	ctx := context.Background()
	var (
		s   *fence.Store
		err error
	)
	if b.pgx {
		var p *pgxpool.Pool
		s, p, err = openPool(ctx, dsn, opts)
		if p != nil {
			t.Cleanup(p.Close)
		}
	} else {
		s, err = fencedsn.Open(ctx, dsn, opts...)
	}
	if errors.Is(err, fence.ErrUnavailable) {
		testdb.Unreachable(t, b.Name, b.env, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}
