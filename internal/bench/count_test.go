package bench

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// The counter sees each call that reaches the driver, and the store under
// test goes through it.
func TestCounterCountsCalls(t *testing.T) {
	ctx := context.Background()
	e, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	c0 := e.Count.Snapshot()
	tx, err := e.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if d := e.Count.Snapshot().Sub(c0); d.Begin != 1 || d.Exec != 1 || d.Commit != 1 || d.Total() != 3 {
		t.Errorf("BEGIN, one statement, COMMIT counted as %+v", d)
	}

	l, err := e.Store.Acquire(ctx, "x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c0 = e.Count.Snapshot()
	if _, err := e.Store.Renew(ctx, l.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := e.Count.Snapshot().Sub(c0); d.Statements() < 1 {
		t.Errorf("a renew through the store was not counted: %+v", d)
	}
}

func TestStats(t *testing.T) {
	s := stats([]time.Duration{5, 1, 3, 2, 4})
	if s.N != 5 || s.Median != 3 || s.Min != 1 || s.Max != 5 || s.Mean != 3 {
		t.Errorf("%+v", s)
	}
}
