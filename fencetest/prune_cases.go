package fencetest

import (
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

func pruneCases() []suiteCase {
	return []suiteCase{
		{"PruneRunsKeepsRunningAndRecent", pruneRuns},
	}
}

// pruneRuns: PruneRuns deletes finished runs older than the retention by the
// database clock, of one lease or of all, and never a running run.
func pruneRuns(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	finished := func(name string) int64 {
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
		return id
	}
	a1, a2, other := finished("prune:a"), finished("prune:a"), finished("prune:other")
	running := mustAcquire(t, s, "prune:a", long)
	live, err := s.StartRun(ctx, running, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Nothing is older than an hour yet.
	if n, err := s.PruneRuns(ctx, "", time.Hour); err != nil || n != 0 {
		t.Fatalf("PruneRuns(1h) = %d, %v; want 0", n, err)
	}
	// Wait until the database clock is past the finished runs' end by more
	// than the retention (a condition, not a guess at the clock's step).
	last, err := s.GetRun(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	const keep = 50 * time.Millisecond
	for {
		now, err := s.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now.Sub(last.FinishedAt) > keep+5*time.Millisecond {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, err := s.PruneRuns(ctx, "prune:a", keep); err != nil || n != 2 {
		t.Fatalf("PruneRuns(prune:a) = %d, %v; want the 2 finished runs of prune:a", n, err)
	}
	for _, id := range []int64{a1, a2} {
		if _, err := s.GetRun(ctx, id); !errors.Is(err, fence.ErrNotFound) {
			t.Errorf("run %d after prune: %v, want ErrNotFound", id, err)
		}
	}
	if r, err := s.GetRun(ctx, live); err != nil || r.Status != fence.RunRunning {
		t.Errorf("the running run after prune: %+v, %v", r, err)
	}
	if _, err := s.GetRun(ctx, other); err != nil {
		t.Errorf("another lease's run was pruned: %v", err)
	}
	if n, err := s.PruneRuns(ctx, "", keep); err != nil || n != 1 {
		t.Fatalf("PruneRuns(all) = %d, %v; want prune:other's run", n, err)
	}
	if r, err := s.GetRun(ctx, live); err != nil || r.Status != fence.RunRunning {
		t.Errorf("the running run after prune of all: %+v, %v", r, err)
	}
	for _, bad := range []time.Duration{0, -time.Hour, time.Microsecond} {
		if _, err := s.PruneRuns(ctx, "", bad); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("PruneRuns(%v): %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := s.PruneRuns(ctx, "bad\x00name", time.Hour); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("PruneRuns with a bad lease name: %v, want ErrInvalid", err)
	}
}
