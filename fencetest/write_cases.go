package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencekit/fence"
)

func writeCases() []suiteCase {
	return []suiteCase{
		{"FencedUpdateRefusedAfterTakeover", fencedUpdate},
		{"FencedWritePlaceholdersAroundMarker", fencedPlaceholders},
		{"FencedInsertSelectAndDelete", fencedInsertDelete},
		{"FencedWriteNoMatchVersusLost", fencedNoMatch},
		{"FencedWriteBadSQLRejected", fencedBadSQL},
		{"InTxCommitsOnlyForHolder", inTx},
		{"CheckTxInCallersTransaction", checkTx},
		{"ExecResourceRefusesLowerFence", execResource},
	}
}

// items creates a user table next to fence's tables, dropped at cleanup.
func items(t testing.TB, s *fence.Store) string {
	t.Helper()
	name := s.Prefix() + "items"
	ctx := ctxT(t)
	h := handleFor(s)
	if _, err := h.exec(ctx, "CREATE TABLE "+name+" (id INT PRIMARY KEY, val VARCHAR(100) NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.exec(context.Background(), "DROP TABLE IF EXISTS "+name) })
	for i := 1; i <= 3; i++ {
		if _, err := h.exec(ctx, sqlf(s, "INSERT INTO "+name+" (id, val) VALUES (?, ?)"), i, "init"); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// sqlf turns ? placeholders into $n on PostgreSQL.
func sqlf(s *fence.Store, q string) string {
	if s.Dialect() != fence.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func val(t testing.TB, s *fence.Store, table string, id int) string {
	t.Helper()
	var v string
	if err := handleFor(s).queryRow(ctxT(t), sqlf(s, "SELECT val FROM "+table+" WHERE id = ?"), id).Scan(&v); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "<none>"
		}
		t.Fatal(err)
	}
	return v
}

func takeover(t testing.TB, s *fence.Store, name string, old fence.Token) fence.Token {
	t.Helper()
	if _, err := s.Revoke(ctxT(t), name); err != nil {
		t.Fatal(err)
	}
	n := mustAcquire(t, s, name, long)
	if n.Fence <= old.Fence {
		t.Fatalf("takeover fence %d not above %d", n.Fence, old.Fence)
	}
	return n
}

func fencedUpdate(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	tbl := items(t, s)
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	n, err := s.Exec(ctx, a, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ? AND {{fence}}"), "by-A", 1)
	if err != nil || n != 1 {
		t.Fatalf("holder's fenced update: %d, %v", n, err)
	}
	bt := takeover(t, s, "job", a)
	_, err = s.Exec(ctx, a, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ? AND {{fence}}"), "stale-A", 1)
	var le *fence.LostError
	if !errors.As(err, &le) || le.Current != bt.Fence {
		t.Fatalf("stale write: %v", err)
	}
	if v := val(t, s, tbl, 1); v != "by-A" {
		t.Fatalf("stale write changed the row: %q", v)
	}
	if _, err := s.Exec(ctx, bt, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ? AND {{fence}}"), "by-B", 1); err != nil {
		t.Fatal(err)
	}
	// An expired token is refused even before anyone takes over.
	e := mustAcquire(t, s, "short", long)
	lapse(t, s, e)
	_, err = s.Exec(ctx, e, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ? AND {{fence}}"), "expired", 2)
	wantLost(t, err, fence.LostExpired, e.Fence)
	if v := val(t, s, tbl, 2); v != "init" {
		t.Fatalf("expired write changed the row: %q", v)
	}
}

func fencedPlaceholders(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	tbl := items(t, s)
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	// Marker between the caller's placeholders, and a '?' and the marker
	// text inside a string literal that must be left alone.
	q := sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE {{fence}} AND id = ? AND val <> 'is {{fence}} a ?'")
	if n, err := s.Exec(ctx, a, q, "v1", 3); err != nil || n != 1 {
		t.Fatalf("%d %v", n, err)
	}
	if v := val(t, s, tbl, 3); v != "v1" {
		t.Fatalf("val %q", v)
	}
	// Marker first.
	q = sqlf(s, "UPDATE "+tbl+" SET val = 'v2' WHERE {{fence}} AND id = ?")
	if n, err := s.Exec(ctx, a, q, 3); err != nil || n != 1 {
		t.Fatalf("%d %v", n, err)
	}
	// Fenced returns SQL and arguments for callers that run it themselves.
	fq, args, err := s.Fenced(a, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ? AND {{fence}}"), "v3", 3)
	if err != nil || len(args) != 5 || strings.Contains(fq, "{{fence}}") {
		t.Fatalf("Fenced: %q %v %v", fq, args, err)
	}
	if _, err := handleFor(s).exec(ctx, fq, args...); err != nil {
		t.Fatal(err)
	}
	if v := val(t, s, tbl, 3); v != "v3" {
		t.Fatalf("val %q", v)
	}
}

func fencedInsertDelete(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	tbl := items(t, s)
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	from := ""
	if s.Dialect() == fence.MySQL {
		from = " FROM DUAL" // MySQL needs a FROM for WHERE
	}
	ins := sqlf(s, "INSERT INTO "+tbl+" (id, val) SELECT ?, ?"+from+" WHERE {{fence}}")
	if n, err := s.Exec(ctx, a, ins, 10, "inserted"); err != nil || n != 1 {
		t.Fatalf("insert: %d %v", n, err)
	}
	del := sqlf(s, "DELETE FROM "+tbl+" WHERE id = ? AND {{fence}}")
	if n, err := s.Exec(ctx, a, del, 1); err != nil || n != 1 {
		t.Fatalf("delete: %d %v", n, err)
	}
	takeover(t, s, "job", a)
	if _, err := s.Exec(ctx, a, ins, 11, "stale"); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("stale insert: %v", err)
	}
	if _, err := s.Exec(ctx, a, del, 2); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("stale delete: %v", err)
	}
	if val(t, s, tbl, 11) != "<none>" || val(t, s, tbl, 2) != "init" || val(t, s, tbl, 10) != "inserted" {
		t.Fatal("stale insert or delete changed the table")
	}
}

func fencedNoMatch(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	tbl := items(t, s)
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	_, err := s.Exec(ctx, a, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ? AND {{fence}}"), "x", 999)
	if !errors.Is(err, fence.ErrNoMatch) || errors.Is(err, fence.ErrLost) {
		t.Fatalf("no matching row while held: %v", err)
	}
}

func fencedBadSQL(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	tbl := items(t, s)
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	for _, q := range []string{
		"UPDATE " + tbl + " SET val = 'x' WHERE id = 1",                  // no marker
		"UPDATE " + tbl + " SET val = 'x' WHERE {{fence}} AND {{fence}}", // two
		sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ? AND {{fence}}"), // too few args
		"UPDATE " + tbl + " SET val = 'unterminated WHERE {{fence}}",     // bad literal
	} {
		if _, err := s.Exec(ctx, a, q, "only-one"); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%q: %v", q, err)
		}
	}
	if v := val(t, s, tbl, 1); v != "init" {
		t.Fatalf("rejected SQL changed the row: %q", v)
	}
}

func inTx(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	tbl := items(t, s)
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	h := handleFor(s)
	err := h.inTx(ctx, a, func(tx txHandle) error {
		for id := 1; id <= 2; id++ {
			if _, err := tx.exec(ctx, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ?"), "tx-A", id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = h.inTx(ctx, a, func(tx txHandle) error {
		if _, err := tx.exec(ctx, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ?"), "rolled-back", 1); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || val(t, s, tbl, 1) != "tx-A" {
		t.Fatalf("fn error must roll back: %v, val %q", err, val(t, s, tbl, 1))
	}
	takeover(t, s, "job", a)
	called := false
	err = h.inTx(ctx, a, func(txHandle) error { called = true; return nil })
	if !errors.Is(err, fence.ErrLost) || called {
		t.Fatalf("stale InTx: err %v, fn called %v", err, called)
	}
}

func checkTx(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	tbl := items(t, s)
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	h := handleFor(s)
	tx, err := h.begin(ctx, sql.LevelDefault)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.check(ctx, a); err != nil {
		tx.rollback(ctx)
		t.Fatal(err)
	}
	if _, err := tx.exec(ctx, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ?"), "checked", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.commit(ctx); err != nil {
		t.Fatal(err)
	}
	bt := takeover(t, s, "job", a)
	tx, err = h.begin(ctx, sql.LevelDefault)
	if err != nil {
		t.Fatal(err)
	}
	err = tx.check(ctx, a)
	tx.rollback(ctx)
	var le *fence.LostError
	if !errors.As(err, &le) || le.Current != bt.Fence {
		t.Fatalf("stale CheckTx: %v", err)
	}
}

func execResource(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	tbl := items(t, s)
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	q := sqlf(s, "UPDATE "+tbl+" SET val = ?, fence_token = {{fence_token}} WHERE id = ? AND fence_token <= {{fence_token}}")
	if s.Dialect() == fence.Postgres {
		// sqlf numbered the ?s; the markers are numbered after them.
		q = "UPDATE " + tbl + " SET val = $1, fence_token = {{fence_token}} WHERE id = $2 AND fence_token <= {{fence_token}}"
	}
	h := handleFor(s)
	if _, err := h.execResource(ctx, a, q, "A", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := h.execResource(ctx, a, q, "A again", 1); err != nil {
		t.Fatalf("equal fence must be accepted: %v", err)
	}
	bt := takeover(t, s, "job", a)
	if _, err := h.execResource(ctx, bt, q, "B", 1); err != nil {
		t.Fatal(err)
	}
	_, err := h.execResource(ctx, a, q, "stale A", 1)
	if !errors.Is(err, fence.ErrStale) || !errors.Is(err, fence.ErrLost) {
		t.Fatalf("lower fence: %v", err)
	}
	if v := val(t, s, tbl, 1); v != "B" {
		t.Fatalf("val %q", v)
	}
	var f int64
	if err := h.queryRow(ctx, sqlf(s, "SELECT fence_token FROM "+tbl+" WHERE id = ?"), 1).Scan(&f); err != nil || f != bt.Fence {
		t.Fatalf("stored fence %d %v", f, err)
	}
}
