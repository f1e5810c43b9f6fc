package fencetest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/fencekit/fence"
)

func runCases() []suiteCase {
	return []suiteCase{
		{"RunLedgerFencedCompletion", runLedger},
		{"RunStartRefusedForStaleToken", runStartStale},
		{"RunSweepMarksDeadGenerationsLost", runSweep},
		{"RunListFilters", runList},
	}
}

func runLedger(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	// A long TTL ended by lapse, so StartRun cannot be outlasted by a
	// loaded machine (at 1 s it could be).
	a := mustAcquire(t, s, "admin:reconciliation", long)
	ra, err := s.StartRun(ctx, a, map[string]string{"phase": "scan"})
	if err != nil {
		t.Fatal(err)
	}
	lapse(t, s, a) // A pauses past its TTL
	bt := mustAcquire(t, s, "admin:reconciliation", long)
	rb, err := s.StartRun(ctx, bt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetRun(ctx, ra); got.Status != fence.RunAbandoned || got.FinishedAt.IsZero() {
		t.Fatalf("A's run after B started: %+v", got)
	}
	code := 0
	if err := s.FinishRun(ctx, bt, rb, fence.Completion{Result: map[string]int{"fixed": 3}, ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	// A resumes and tries to complete: refused, and nothing of it is stored.
	err = s.FinishRun(ctx, a, ra, fence.Completion{Result: map[string]int{"fixed": 99}})
	var le *fence.LostError
	if !errors.As(err, &le) || le.Current != bt.Fence {
		t.Fatalf("stale completion: %v", err)
	}
	gb, err := s.GetRun(ctx, rb)
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]int
	if gb.Status != fence.RunSucceeded || json.Unmarshal(gb.Result, &res) != nil || res["fixed"] != 3 ||
		gb.ExitCode == nil || *gb.ExitCode != 0 || gb.Fence != bt.Fence || gb.Duration() < 0 {
		t.Fatalf("B's run: %+v", gb)
	}
	ga, _ := s.GetRun(ctx, ra)
	if ga.Status == fence.RunSucceeded || string(ga.Result) != `{"phase":"scan"}` {
		t.Fatalf("A's run after its rejected completion: %+v", ga)
	}
	// A finish for the holder's own run after it expired, with nobody else:
	// refused and the run marked lost.
	c := mustAcquire(t, s, "other", long)
	rc, err := s.StartRun(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	lapse(t, s, c)
	if err := s.FinishRun(ctx, c, rc, fence.Completion{Err: errors.New("x")}); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("expired completion: %v", err)
	}
	if gc, _ := s.GetRun(ctx, rc); gc.Status != fence.RunLost || gc.Error == "" {
		t.Fatalf("expired run: %+v", gc)
	}
	// A failed job is recorded as failed with its error.
	d := mustAcquire(t, s, "failing", long)
	rd, _ := s.StartRun(ctx, d, nil)
	if err := s.FinishRun(ctx, d, rd, fence.Completion{Err: errors.New("disk full")}); err != nil {
		t.Fatal(err)
	}
	if gd, _ := s.GetRun(ctx, rd); gd.Status != fence.RunFailed || gd.Error != "disk full" {
		t.Fatalf("failed run: %+v", gd)
	}
	// Finishing twice is refused: the run is no longer running.
	if err := s.FinishRun(ctx, d, rd, fence.Completion{}); err == nil {
		t.Fatal("second finish accepted")
	}
	if _, err := s.GetRun(ctx, 987654); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("absent run: %v", err)
	}
}

func runStartStale(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	takeover(t, s, "job", a)
	if _, err := s.StartRun(ctx, a, nil); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("stale start: %v", err)
	}
	if rs, _ := s.Runs(ctx, fence.RunFilter{Lease: "job"}); len(rs) != 0 {
		t.Fatalf("stale start recorded a run: %+v", rs)
	}
}

func runSweep(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	// The dead lease must outlive its own StartRun even on a loaded machine
	// (at 50 ms a slow StartRun was refused and the sweep found nothing):
	// a long TTL, ended by lapse.
	dead := mustAcquire(t, s, "dead", long)
	rd, err := s.StartRun(ctx, dead, nil)
	if err != nil {
		t.Fatalf("start run of dead: %v", err)
	}
	live := mustAcquire(t, s, "live", long)
	rl, err := s.StartRun(ctx, live, nil)
	if err != nil {
		t.Fatalf("start run of live: %v", err)
	}
	lapse(t, s, dead)
	n, err := s.SweepRuns(ctx)
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if g, _ := s.GetRun(ctx, rd); g.Status != fence.RunLost {
		t.Fatalf("dead run: %+v", g)
	}
	if g, _ := s.GetRun(ctx, rl); g.Status != fence.RunRunning {
		t.Fatalf("live run: %+v", g)
	}
	if err := s.MarkRunLost(ctx, rl, live.Fence, "worker gave up"); err != nil {
		t.Fatal(err)
	}
	if g, _ := s.GetRun(ctx, rl); g.Status != fence.RunLost || g.Error != "worker gave up" {
		t.Fatalf("marked run: %+v", g)
	}
}

func runList(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	var ids []int64
	for i := 0; i < 3; i++ {
		a := mustAcquire(t, s, "x", long)
		id, _ := s.StartRun(ctx, a, nil)
		ids = append(ids, id)
		if i < 2 {
			if err := s.FinishRun(ctx, a, id, fence.Completion{}); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	y := mustAcquire(t, s, "y", long)
	s.StartRun(ctx, y, nil)
	all, _ := s.Runs(ctx, fence.RunFilter{})
	if len(all) != 4 || all[0].Lease != "y" {
		t.Fatalf("all runs, newest first: %+v", all)
	}
	xs, _ := s.Runs(ctx, fence.RunFilter{Lease: "x", Status: fence.RunSucceeded})
	if len(xs) != 2 || xs[0].ID != ids[1] || xs[1].ID != ids[0] {
		t.Fatalf("x succeeded: %+v", xs)
	}
	one, _ := s.Runs(ctx, fence.RunFilter{Lease: "x", Limit: 1})
	if len(one) != 1 || one[0].ID != ids[2] || one[0].Status != fence.RunRunning {
		t.Fatalf("limit 1: %+v", one)
	}
	if _, err := s.Runs(ctx, fence.RunFilter{Status: "bogus"}); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("bad status: %v", err)
	}
}
