package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/teststore"
)

// The pgx-native API refuses the stores it cannot serve with ErrInvalid,
// before touching the database, rather than failing later with a nil
// handle. Its semantics are the conformance suite's (TestConformancePgx in
// package postgres).
func TestPgxAPIRefusesWrongStore(t *testing.T) {
	ctx := context.Background()
	if _, err := fence.OpenPool(nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("OpenPool(nil): %v", err)
	}
	lite, err := fence.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "f.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	if lite.Pool() != nil {
		t.Error("a database/sql store has a pool")
	}
	tok := fence.Token{Lease: "job", Owner: "00112233445566778899aabbccddeeff", Fence: 1}
	if _, err := lite.ExecPgx(ctx, nil, tok, "UPDATE t SET v = 1 WHERE {{fence}}"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("ExecPgx on SQLite: %v", err)
	}
	if err := lite.CheckPgxTx(ctx, nil, tok); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("CheckPgxTx on SQLite: %v", err)
	}
	called := false
	if err := lite.InPgxTx(ctx, tok, func(pgx.Tx) error { called = true; return nil }); !errors.Is(err, fence.ErrInvalid) || called {
		t.Errorf("InPgxTx on a database/sql store: %v (fn called %v)", err, called)
	}
}

func TestPoolStoreRefusesDatabaseSQLTx(t *testing.T) {
	s := teststore.Pgx.Open(t)
	if s.DB() != nil || s.Pool() == nil {
		t.Fatalf("pool store: DB %v, Pool %v", s.DB(), s.Pool())
	}
	ctx := context.Background()
	l, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fence.OpenPool(s.Pool(), fence.WithPrefix("x; DROP TABLE y")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("OpenPool with a bad prefix: %v", err)
	}
	called := false
	if err := s.InTx(ctx, l.Token, func(*sql.Tx) error { called = true; return nil }); !errors.Is(err, fence.ErrInvalid) || called {
		t.Errorf("InTx on a pool store: %v (fn called %v)", err, called)
	}
	// Its own fenced writes go through the pool.
	if _, err := s.Pool().Exec(ctx, "CREATE TABLE "+s.Prefix()+"t (id int PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	defer s.Pool().Exec(context.Background(), "DROP TABLE "+s.Prefix()+"t")
	if _, err := s.Pool().Exec(ctx, "INSERT INTO "+s.Prefix()+"t VALUES (1, 'a')"); err != nil {
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
