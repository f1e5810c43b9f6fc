package fenceprom

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// The lease limit exports the first leases by name and says how many it
// left out; the run counts still cover every lease.
func TestStoreCollectorLimit(t *testing.T) {
	ctx := t.Context()
	s := open(t, New())
	for _, name := range []string{"c", "a", "b"} {
		l, err := s.Acquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		id, err := s.StartRun(ctx, l.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishRun(ctx, l.Token, id, fence.Completion{Err: errors.New("boom")}); err != nil {
			t.Fatal(err)
		}
	}
	c := NewStoreCollector(s, WithMaxLeases(2))
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
		# HELP fence_db_leases Number of lease rows in the store.
		# TYPE fence_db_leases gauge
		fence_db_leases 3
		# HELP fence_db_leases_omitted Leases not exported per lease because of the lease limit (fence serve --metrics-max-leases).
		# TYPE fence_db_leases_omitted gauge
		fence_db_leases_omitted 1
		# HELP fence_db_lease_state State of a lease by the database clock: 1 for its state (held, expired, released, revoked), 0 for the others.
		# TYPE fence_db_lease_state gauge
		fence_db_lease_state{lease="a",state="expired"} 0
		fence_db_lease_state{lease="a",state="held"} 1
		fence_db_lease_state{lease="a",state="released"} 0
		fence_db_lease_state{lease="a",state="revoked"} 0
		fence_db_lease_state{lease="b",state="expired"} 0
		fence_db_lease_state{lease="b",state="held"} 1
		fence_db_lease_state{lease="b",state="released"} 0
		fence_db_lease_state{lease="b",state="revoked"} 0
		# HELP fence_db_runs Runs in the ledger by status (running, succeeded, failed, lost, abandoned); pruning lowers it.
		# TYPE fence_db_runs gauge
		fence_db_runs{status="abandoned"} 0
		fence_db_runs{status="failed"} 3
		fence_db_runs{status="lost"} 0
		fence_db_runs{status="running"} 0
		fence_db_runs{status="succeeded"} 0
	`), "fence_db_leases", "fence_db_leases_omitted", "fence_db_lease_state", "fence_db_runs"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	// A limit of 0 exports no lease but still counts them.
	if n := testutil.CollectAndCount(NewStoreCollector(s, WithMaxLeases(0)), "fence_db_lease_state", "fence_db_lease_fence"); n != 0 {
		t.Fatalf("limit 0 exported %d lease series", n)
	}
}

// A scrape that cannot read the database says so, with no other fence_db_
// series, and hands the error over.
func TestStoreCollectorError(t *testing.T) {
	s := open(t, New())
	if _, err := s.Acquire(t.Context(), "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	var got error
	c := NewStoreCollector(s, WithScrapeErrorFunc(func(err error) { got = err }))
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
		# HELP fence_db_scrape_error 1 if this scrape could not read the database (no other fence_db_ series then), else 0.
		# TYPE fence_db_scrape_error gauge
		fence_db_scrape_error 0
	`), "fence_db_scrape_error"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
		# HELP fence_db_scrape_error 1 if this scrape could not read the database (no other fence_db_ series then), else 0.
		# TYPE fence_db_scrape_error gauge
		fence_db_scrape_error 1
	`), "fence_db_scrape_error", "fence_db_leases", "fence_db_runs", "fence_db_lease_state"); err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("the scrape error was not handed to WithScrapeErrorFunc")
	}
}

// fence_db_lease_holder_info carries the holder's name (fence.WithHolder),
// never a piece of the owner token; its HELP says so. Before issue 29 the
// HELP (and the docs) said "the owner token's first 8 characters".
func TestStoreCollectorHolderIsTheName(t *testing.T) {
	ctx := t.Context()
	s, err := fencedsn.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "x.db"), fence.WithHolder("web-3"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "nightly", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(NewStoreCollector(s), strings.NewReader(`
		# HELP fence_db_lease_holder_info Holder name of a held lease (fence.WithHolder; never the owner token), always 1.
		# TYPE fence_db_lease_holder_info gauge
		fence_db_lease_holder_info{holder="web-3",lease="nightly"} 1
	`), "fence_db_lease_holder_info"); err != nil {
		t.Fatal(err)
	}
}
