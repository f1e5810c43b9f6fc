package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/testdb"
)

// backend is one database the tests run on.
type backend struct {
	name   string
	envVar string // where its DSN comes from; "" for SQLite on a temp file
	dsn    func(t *testing.T) string
}

var backends = []backend{
	{"sqlite", "", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "fence.db") }},
	{"postgres", "FENCE_TEST_POSTGRES", func(*testing.T) string { return testdb.PostgresDSN() }},
	{"mysql", "FENCE_TEST_MYSQL", func(*testing.T) string { return testdb.MySQLDSN() }},
}

// env is one test's database: a DSN and a fresh table prefix, so tests on
// one server never share tables.
type env struct {
	b      backend
	dsn    string
	prefix string
}

// eachDB runs fn on every backend in parallel, each on fresh tables that
// are dropped when it ends.
func eachDB(t *testing.T, fn func(t *testing.T, e env)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := env{b: b, dsn: b.dsn(t), prefix: testdb.Prefix()}
			s := e.open(t)
			if _, err := s.Migrate(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			r := newReconciler(s)
			if err := r.setup(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := r.drop(ctx); err != nil {
					t.Errorf("dropping example tables: %v", err)
				}
				if err := s.DropTables(ctx); err != nil {
					t.Errorf("dropping fence's tables: %v", err)
				}
			})
			fn(t, e)
		})
	}
}

// open returns a store of its own (its own connection pool, as another
// replica would have) on e's tables, closed at cleanup.
func (e env) open(t *testing.T) *fence.Store {
	t.Helper()
	s, err := fencedsn.Open(ctxT(t), e.dsn, fence.WithPrefix(e.prefix))
	if err != nil {
		if e.b.envVar != "" && errors.Is(err, fence.ErrUnavailable) {
			testdb.Unreachable(t, e.b.name, e.b.envVar, err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// afterStall is the demo's items once #3 was handed to ivan during A's
// stall and B reconciled them.
var afterStall = []item{
	{1, "alice", "alice"},
	{2, "carol", "carol"},
	{3, "ivan", "ivan"},
	{4, "frank", "frank"},
	{5, "heidi", "heidi"},
	{6, "judy", "judy"},
}

// checkOnlyB asserts that the tables hold B's work and nothing of A's: the
// items as B fixed them, B's report alone, A's run not successful and B's
// succeeded with its summary.
func checkOnlyB(t *testing.T, r *reconciler, runA, runB, fenceB int64) {
	t.Helper()
	ctx := ctxT(t)
	items, err := r.listItems(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(items, afterStall) {
		t.Errorf("items = %v, want B's fixes %v", items, afterStall)
	}
	reps, err := r.listReports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantRep := report{RunID: runB, Fence: fenceB, Fixed: 3, Body: "#2 bob->carol\n#3 dave->ivan\n#5 grace->heidi"}
	if len(reps) != 1 || reps[0] != wantRep {
		t.Errorf("reports = %+v, want only B's %+v", reps, wantRep)
	}
	ra, err := r.store.GetRun(ctx, runA)
	if err != nil {
		t.Fatal(err)
	}
	if ra.Status != fence.RunLost && ra.Status != fence.RunAbandoned {
		t.Errorf("A's run %d is %s (%s), want lost or abandoned", runA, ra.Status, ra.Error)
	}
	if ra.FinishedAt.IsZero() {
		t.Errorf("A's run %d has no finish time", runA)
	}
	rb, err := r.store.GetRun(ctx, runB)
	if err != nil {
		t.Fatal(err)
	}
	if rb.Status != fence.RunSucceeded || rb.Fence != fenceB {
		t.Errorf("B's run %d is %s at fence %d, want succeeded at fence %d", runB, rb.Status, rb.Fence, fenceB)
	}
	var sum summary
	if err := json.Unmarshal(rb.Result, &sum); err != nil {
		t.Fatalf("B's run result %s: %v", rb.Result, err)
	}
	if want := (summary{Scanned: 6, Fixed: 3, Reported: true, Fence: fenceB, RunID: runB}); sum != want {
		t.Errorf("B's run result = %+v, want %+v", sum, want)
	}
}
