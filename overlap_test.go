package fence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/ops"
	"github.com/fencekit/fence/internal/teststore"
)

// The SIGSTOP story without the signal: a worker's lease is taken over and
// the successor starts its run (which marks the worker's run abandoned, with
// the successor's start as its end) while the worker's job goes on; the
// worker's keeper notices the loss first, at its next renewal, and the job
// stops. Before, the runner marked its run lost, which changed nothing (the
// run was no longer running): the ledger ended the stale run when its
// successor started, and the timeline showed no overlap. Now the runner
// records the real end.

// takeOver revokes name and has another owner acquire it and start a run
// (or term, with start); it returns the successor's run. It then waits until
// the database clock moved on, so the stale run's real end is after it.
func takeOver(t *testing.T, s *fence.Store, name string) (fence.Lease, int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Revoke(ctx, name); err != nil {
		t.Error(err)
		return fence.Lease{}, 0
	}
	l, err := s.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Error(err)
		return fence.Lease{}, 0
	}
	id, err := s.StartRun(ctx, l.Token, nil)
	if err != nil {
		t.Error(err)
		return fence.Lease{}, 0
	}
	waitDBPast(t, s, 30*time.Millisecond)
	return l, id
}

// waitDBPast waits until the database clock is d past now.
func waitDBPast(t *testing.T, s *fence.Store, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	t0, err := s.Now(ctx)
	if err != nil {
		t.Error(err)
		return
	}
	for {
		now, err := s.Now(ctx)
		if err != nil || now.Sub(t0) >= d {
			return
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, not a wait for an outcome
	}
}

// checkOverlap: the stale run ended after its successor started, says
// how, and the operations page's timeline draws the overlap.
func checkOverlap(t *testing.T, s *fence.Store, name string, stale, succ int64) {
	t.Helper()
	ctx := context.Background()
	sr, err := s.GetRun(ctx, stale)
	if err != nil {
		t.Fatal(err)
	}
	nr, err := s.GetRun(ctx, succ)
	if err != nil {
		t.Fatal(err)
	}
	if sr.Status != fence.RunAbandoned || !sr.FinishedAt.After(nr.StartedAt) || !strings.Contains(sr.Error, "stopped late") {
		t.Errorf("stale run %d: %s, ended %v, error %q; want abandoned, ending after its successor %d started (%v), saying it stopped late",
			stale, sr.Status, sr.FinishedAt, sr.Error, succ, nr.StartedAt)
	}
	srv := httptest.NewServer(ops.Handler(s))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/timeline?lease=" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	svg, _ := io.ReadAll(resp.Body)
	if want := fmt.Sprintf(`class="overlap" data-run="%d" data-successor="%d"`, stale, succ); !strings.Contains(string(svg), want) {
		t.Errorf("the timeline does not draw the overlap (%s):\n%s", want, svg)
	}
}

func TestRunRecordsOverlapWhenKeeperNoticesFirst(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		const name = "overlap-run"
		var succ int64
		res, err := fence.Run(context.Background(), s, name, func(ctx context.Context) error {
			_, succ = takeOver(t, s, name)
			<-ctx.Done() // the keeper's next renewal is refused
			return context.Cause(ctx)
		}, fence.WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != fence.Lost {
			t.Fatalf("outcome %s (%v), want lost: the keeper noticed first", res.Outcome, res.Err)
		}
		checkOverlap(t, s, name, res.RunID, succ)
	})
}

func TestScheduleRecordsOverlapWhenKeeperNoticesFirst(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		const name = "overlap-schedule"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var succ int64
		results := make(chan fence.Result, 16)
		err := fence.Schedule(ctx, s, name, "@every 1s", func(jctx context.Context) error {
			if succ == 0 {
				_, succ = takeOver(t, s, name)
				<-jctx.Done()
				return context.Cause(jctx)
			}
			return nil
		}, fence.WithTTL(3*time.Second), fence.OnFinished(func(r fence.Result) {
			if r.Outcome == fence.Lost {
				results <- r
				cancel()
			}
		}))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Schedule: %v", err)
		}
		checkOverlap(t, s, name, (<-results).RunID, succ)
	})
}

func TestElectRecordsTermsAndOverlap(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		const name = "overlap-elect"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var succ int64
		var tok fence.Token
		err := fence.Elect(ctx, s, name, fence.ElectionCallbacks{
			OnStartedLeading: func(lctx context.Context, t0 fence.Token) {
				tok = t0
				_, succ = takeOver(t, s, name)
				<-lctx.Done()
			},
			OnStoppedLeading: cancel,
		}, fence.WithTTL(3*time.Second))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Elect: %v", err)
		}
		runs, err := s.Runs(context.Background(), fence.RunFilter{Lease: name})
		if err != nil {
			t.Fatal(err)
		}
		var term fence.RunInfo
		for _, r := range runs {
			if r.Fence == tok.Fence {
				term = r
			}
		}
		if !term.IsTerm() || term.Holder != s.Holder() || term.StartedAt.IsZero() {
			t.Fatalf("the term of fence %d is not in the ledger as a term of %q: %+v", tok.Fence, s.Holder(), runs)
		}
		checkOverlap(t, s, name, term.ID, succ)
	})
}

// A term that ends by stepping down is in the ledger from its start to its
// end, succeeded, with its leader and fence; the next leader's term
// follows it.
func TestElectTermsInLedger(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		const name = "terms"
		var fences []int64
		for range 2 {
			ctx, cancel := context.WithCancel(context.Background())
			err := fence.Elect(ctx, s, name, fence.ElectionCallbacks{
				OnStartedLeading: func(_ context.Context, tok fence.Token) {
					fences = append(fences, tok.Fence)
					cancel()
				},
			}, fence.WithTTL(3*time.Second))
			cancel()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Elect: %v", err)
			}
		}
		runs, err := s.Runs(context.Background(), fence.RunFilter{Lease: name})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 2 {
			t.Fatalf("%d runs for 2 terms: %+v", len(runs), runs)
		}
		for i, r := range []fence.RunInfo{runs[1], runs[0]} {
			if !r.IsTerm() || r.Fence != fences[i] || r.Status != fence.RunSucceeded || r.Holder != s.Holder() || r.FinishedAt.Before(r.StartedAt) {
				t.Errorf("term %d: %+v; want a succeeded term of fence %d held by %q", i, r, fences[i], s.Holder())
			}
		}
		if runs[0].StartedAt.Before(runs[1].FinishedAt) {
			t.Errorf("the second term starts before the first ended: %v < %v", runs[0].StartedAt, runs[1].FinishedAt)
		}
	})
}
