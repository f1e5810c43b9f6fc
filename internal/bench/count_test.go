package bench

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencekit/fence"
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

// The targets differ by database: SQLite's reads are compared with
// a primary-key read and its lease operations may cost 1.15x.
func TestCaseGoalsPerDialect(t *testing.T) {
	byName := map[string]Case{}
	for _, c := range Cases() {
		byName[c.Name] = c
	}
	for _, tc := range []struct {
		name     string
		d        fence.Dialect
		baseline string
		max      float64
	}{
		{"is_held", fence.SQLite, "pk_select", 1.3},
		{"is_held", fence.Postgres, Select1, 1.5},
		{"acquire_held", fence.SQLite, "pk_select", 1.3},
		{"acquire_held", fence.MySQL, Select1, 1.5},
		{"acquire", fence.SQLite, FloorUpdate, 1.15},
		{"acquire", fence.Postgres, FloorUpdate, 1.10},
		{"release", fence.MySQL, FloorUpdate, 1.10},
		{"fenced_write", fence.MySQL, "unfenced_write", 1.20},
		{"fenced_write", fence.Postgres, "unfenced_write", 1.10},
		{"fenced_tx", fence.SQLite, "unfenced_tx", 1.25},
	} {
		c := byName[tc.name].For(tc.d)
		if c.Baseline != tc.baseline || c.MaxRatio != tc.max {
			t.Errorf("%s on %s: <= %.2fx %s, want <= %.2fx %s", tc.name, tc.d, c.MaxRatio, c.Baseline, tc.max, tc.baseline)
		}
	}
}

// Close drops every table the bench created, UNLOGGED ones included.
func TestCreatedTable(t *testing.T) {
	for q, want := range map[string]string{
		"CREATE TABLE b_x (id int)":                      "b_x",
		"CREATE UNLOGGED TABLE b_river (name text)":      "b_river",
		"create table if not exists b_y (id int)":        "b_y",
		"CREATE TABLE b_z (LIKE b_leases INCLUDING ALL)": "b_z",
		"CREATE INDEX b_i ON b_x (id)":                   "",
		"SELECT 1":                                       "",
	} {
		if got := createdTable(q); got != want {
			t.Errorf("createdTable(%q) = %q, want %q", q, got, want)
		}
	}
}

// A statement that passes no counted call (run on pgx's own connection, or
// prepared by pgx on first use) still counts as a round trip through the
// network turns.
func TestRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		c    Counts
		want int64
	}{
		{Counts{Query: 1, Net: 1}, 1},
		{Counts{Net: 1}, 1},             // postgres rawRow under database/sql
		{Counts{Exec: 1, Net: 2}, 2},    // a statement pgx prepared on first use
		{Counts{Exec: 1, Commit: 1}, 2}, // a driver without a turn counter
	} {
		if got := tc.c.RoundTrips(); got != tc.want {
			t.Errorf("%+v: %d round trips, want %d", tc.c, got, tc.want)
		}
	}
}
