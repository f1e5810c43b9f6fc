package fencepgx_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencepgx"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/postgres"
	"github.com/fencekit/fence/sqlite"
)

// The pgx-native API refuses the stores it cannot serve with ErrInvalid,
// before touching the database, rather than failing later with a nil
// handle. Its semantics are the conformance suite's (TestConformancePgx in
// package postgres).
func TestPgxAPIRefusesWrongStore(t *testing.T) {
	ctx := context.Background()
	if _, err := postgres.NewPool(nil, ""); err == nil {
		t.Errorf("postgres.NewPool(nil) succeeded")
	}
	if _, err := fence.New(ctx, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("fence.New(nil): %v", err)
	}
	drv, err := sqlite.OpenDriver(filepath.Join(t.TempDir(), "f.db"), "")
	if err != nil {
		t.Fatal(err)
	}
	lite, err := fence.New(ctx, drv)
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	tok := fence.Token{Lease: "job", Owner: "00112233445566778899aabbccddeeff", Fence: 1}
	if _, err := fencepgx.Exec(ctx, lite, nil, tok, "UPDATE t SET v = 1 WHERE {{fence}}"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("fencepgx.Exec on SQLite: %v", err)
	}
	if err := fencepgx.CheckTx(ctx, lite, nil, tok); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("fencepgx.CheckTx on SQLite: %v", err)
	}
	called := false
	if err := fencepgx.InTx(ctx, lite, nil, tok, func(pgx.Tx) error { called = true; return nil }); !errors.Is(err, fence.ErrInvalid) || called {
		t.Errorf("fencepgx.InTx on SQLite: %v (fn called %v)", err, called)
	}
	if err := lite.CheckWith(ctx, tok, func(context.Context, string, []any) (bool, error) { called = true; return true, nil }); !errors.Is(err, fence.ErrInvalid) || called {
		t.Errorf("CheckWith on SQLite: %v (query called %v)", err, called)
	}
}

func TestPoolStoreRefusesDatabaseSQLTx(t *testing.T) {
	s := teststore.Pgx.Open(t)
	d, ok := s.Driver().(*postgres.Driver)
	if s.DB() != nil || !ok || d.Pool() == nil {
		t.Fatalf("pool store: DB %v, driver %T", s.DB(), s.Driver())
	}
	pool := d.Pool()
	ctx := context.Background()
	l, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fence.New(ctx, d, fence.WithPrefix("x; DROP TABLE y")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("New over a pool driver with a bad prefix: %v", err)
	}
	called := false
	if err := s.InTx(ctx, l.Token, func(*sql.Tx) error { called = true; return nil }); !errors.Is(err, fence.ErrInvalid) || called {
		t.Errorf("InTx on a pool store: %v (fn called %v)", err, called)
	}
	// Its own fenced writes go through the pool.
	if _, err := pool.Exec(ctx, "CREATE TABLE "+s.Prefix()+"t (id int PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(context.Background(), "DROP TABLE "+s.Prefix()+"t")
	if _, err := pool.Exec(ctx, "INSERT INTO "+s.Prefix()+"t VALUES (1, 'a')"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Exec(ctx, l.Token, "UPDATE "+s.Prefix()+"t SET v = $1 WHERE id = $2 AND {{fence}}", "b", 1); err != nil || n != 1 {
		t.Fatalf("Exec on a pool store: %d, %v", n, err)
	}
	if _, err := s.Revoke(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, l.Token, "UPDATE "+s.Prefix()+"t SET v = $1 WHERE id = $2 AND {{fence}}", "c", 1); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("stale Exec on a pool store: %v", err)
	}
}
