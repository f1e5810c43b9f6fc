package fencetest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fencekit/fence"
)

func pageCases() []suiteCase {
	return []suiteCase{
		{"ListPageWalksEveryLeaseByName", listPage},
		{"RunsBeforePagesNewestFirst", runsBefore},
		{"RefusedCompletionOfAbandonedRunKeepsItsEnd", refusedAbandoned},
	}
}

// listPage: walking ListPage with the last name as the cursor visits every
// lease once, in List's byte-wise order, and an empty last page still
// carries the database clock.
func listPage(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	// "B" sorts before "a" byte-wise, "a b" before "a:b"; a case-folding
	// or locale collation would order them otherwise.
	names := []string{"a:b", "B", "a b", "job/é", "job/z", "a"}
	for _, n := range names {
		mustAcquire(t, s, n, long)
	}
	all, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(names)
	slices.Sort(want)
	var got []string
	for _, l := range all {
		got = append(got, l.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List order %q, want %q", got, want)
	}
	got = nil
	after := ""
	for pages := 0; ; pages++ {
		if pages > len(names) {
			t.Fatalf("ListPage did not end after %d pages (%q so far)", pages, got)
		}
		page, now, err := s.ListPage(ctx, fence.LeaseFilter{After: after, Limit: 4})
		if err != nil {
			t.Fatal(err)
		}
		if now.IsZero() {
			t.Fatalf("page after %q: no database clock", after)
		}
		if len(page) > 4 {
			t.Fatalf("page after %q has %d leases, limit 4", after, len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, l := range page {
			got = append(got, l.Name)
		}
		after = page[len(page)-1].Name
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages visited %q, want %q", got, want)
	}
	if _, _, err := s.ListPage(ctx, fence.LeaseFilter{Limit: -1}); err == nil {
		t.Error("ListPage accepted a negative limit")
	}
}

// runsBefore: Runs with Before pages through the ledger newest first, with
// and without a lease filter, and the pages add up to the whole list.
func runsBefore(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	var ids, ofA []int64
	for i := range 5 {
		name := "page:a"
		if i%2 == 1 {
			name = "page:b"
		}
		tok := mustAcquire(t, s, name, long)
		id, err := s.StartRun(ctx, tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishRun(ctx, tok, id, fence.Completion{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, tok); err != nil {
			t.Fatal(err)
		}
		ids = append([]int64{id}, ids...)
		if name == "page:a" {
			ofA = append([]int64{id}, ofA...)
		}
	}
	walk := func(lease string) []int64 {
		var got []int64
		var before int64
		for range 10 {
			rs, err := s.Runs(ctx, fence.RunFilter{Lease: lease, Limit: 2, Before: before})
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == 0 {
				return got
			}
			for _, r := range rs {
				if before != 0 && r.ID >= before {
					t.Fatalf("run %d on the page before %d", r.ID, before)
				}
				got = append(got, r.ID)
			}
			before = rs[len(rs)-1].ID
		}
		t.Fatalf("paging runs of %q did not end (%v so far)", lease, got)
		return nil
	}
	if got := walk(""); !slices.Equal(got, ids) {
		t.Errorf("pages of all runs %v, want %v", got, ids)
	}
	if got := walk("page:a"); !slices.Equal(got, ofA) {
		t.Errorf("pages of page:a's runs %v, want %v", got, ofA)
	}
	if _, err := s.Runs(ctx, fence.RunFilter{Before: -1}); err == nil {
		t.Error("Runs accepted a negative cursor")
	}
}

// refusedAbandoned: the incident fence exists for. A's run is still going
// when the lease is revoked and B takes over, starts (abandoning A's run)
// and finishes; A's completion is refused, and the ledger keeps when A
// really ended — after B started — once, without changing its status.
func refusedAbandoned(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	ra, err := s.StartRun(ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	bt := mustAcquire(t, s, "job", long)
	rb, err := s.StartRun(ctx, bt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, bt, rb, fence.Completion{}); err != nil {
		t.Fatal(err)
	}
	runB, err := s.GetRun(ctx, rb)
	if err != nil {
		t.Fatal(err)
	}
	// A's worker reports only once the database clock has moved past B's
	// end, so that the overlap is visible at millisecond resolution.
	for {
		now, err := s.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now.After(runB.FinishedAt) {
			break
		}
	}
	if err := s.FinishRun(ctx, a, ra, fence.Completion{}); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("A's completion after the takeover: %v, want ErrLost", err)
	}
	runA, err := s.GetRun(ctx, ra)
	if err != nil {
		t.Fatal(err)
	}
	if runA.Status != fence.RunAbandoned || !strings.HasSuffix(runA.Error, "; completion refused") {
		t.Fatalf("A's run after its refused completion: %s %q, want abandoned ending in \"; completion refused\"", runA.Status, runA.Error)
	}
	if !runA.FinishedAt.After(runB.FinishedAt) {
		t.Fatalf("A's run ends at %v, not after B's end %v: the overlap is lost", runA.FinishedAt, runB.FinishedAt)
	}
	if err := s.FinishRun(ctx, a, ra, fence.Completion{}); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("A's retried completion: %v, want ErrLost", err)
	}
	again, err := s.GetRun(ctx, ra)
	if err != nil {
		t.Fatal(err)
	}
	if !again.FinishedAt.Equal(runA.FinishedAt) || again.Error != runA.Error {
		t.Errorf("a retried refused completion changed the run: %v %q, was %v %q", again.FinishedAt, again.Error, runA.FinishedAt, runA.Error)
	}
}
