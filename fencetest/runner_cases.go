package fencetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

func runnerCases() []suiteCase {
	return []suiteCase{
		{"RunnerCompletesAndReleases", runnerCompletes},
		{"RunnerNotAcquiredWhenHeld", runnerNotAcquired},
		{"RunnerRenewsPastTTL", runnerRenews},
		{"RunnerCancelsJobOnRevoke", runnerRevoked},
		{"RunnerCancelsJobWhenRenewalUnproven", runnerUnproven},
		{"RunnerRecordsJobFailure", runnerFails},
		{"RunnerCompletionRejectedWhenLossUnnoticed", runnerRejected},
		{"ScheduleRunsEachSlotOnce", scheduleOnce},
	}
}

func runnerCompletes(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	var (
		started, finished bool
		inCtx             fence.Token
	)
	r, err := fence.Run(ctx, s, "job", func(ctx context.Context) error {
		tk, ok := fence.TokenFrom(ctx)
		if !ok || tk.Lease != "job" || tk.Fence <= 0 {
			t.Errorf("token in ctx: %v %v", tk, ok)
		}
		inCtx = tk
		if id, ok := fence.RunIDFrom(ctx); !ok || id == 0 {
			t.Errorf("run id in ctx: %v %v", id, ok)
		}
		fence.SetResult(ctx, map[string]int{"items": 7})
		return nil
	}, fence.WithTTL(3*time.Second),
		fence.OnStarted(func(context.Context, fence.Token) { started = true }),
		fence.OnFinished(func(fence.Result) { finished = true }))
	if err != nil || r.Outcome != fence.Completed || r.Err != nil || !started || !finished {
		t.Fatalf("result %+v err %v started %v finished %v", r, err, started, finished)
	}
	run, err := s.GetRun(ctx, r.RunID)
	if err != nil || run.Status != fence.RunSucceeded || string(run.Result) != `{"items":7}` || run.Fence != inCtx.Fence {
		t.Fatalf("run %+v %v", run, err)
	}
	if info, _ := s.Get(ctx, "job"); info.State != fence.StateReleased || info.Fence != inCtx.Fence {
		t.Fatalf("lease after run: %+v", info)
	}
}

func runnerNotAcquired(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	mustAcquire(t, s, "job", long)
	ran := false
	r, err := fence.Run(ctxT(t), s, "job", func(context.Context) error { ran = true; return nil })
	if err != nil || r.Outcome != fence.NotAcquired || !errors.Is(r.Err, fence.ErrHeld) || ran {
		t.Fatalf("%+v %v ran=%v", r, err, ran)
	}
}

// The runner renews while the job runs: the lease's expiry moves forward
// past the one the acquisition set, three times, and the run completes.
// The renewals come every 50 ms but the TTL is a minute: a loaded machine
// that answers a renewal late (at a TTL of 1.5 s one was not answered within
// the 1 s renew deadline) cannot fail the case, and the job waits for the
// renewals it expects, not for a time.
func runnerRenews(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	var renewals int
	r, err := fence.Run(ctx, s, "job", func(ctx context.Context) error {
		first, err := s.Get(ctx, "job")
		if err != nil {
			return err
		}
		last := first.ExpiresAt
		for renewals < 3 {
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			info, err := s.Get(ctx, "job")
			if err != nil {
				return err
			}
			if info.Fence != first.Fence || info.State != fence.StateHeld {
				return fmt.Errorf("lease changed hands during the run: %+v, was %+v", info, first)
			}
			if info.ExpiresAt.After(last) {
				renewals++
				last = info.ExpiresAt
			}
		}
		return nil
	}, fence.WithTTL(time.Minute), fence.WithRenewEvery(50*time.Millisecond), fence.WithCallTimeout(20*time.Second))
	if err != nil || r.Outcome != fence.Completed {
		t.Fatalf("%+v %v (renewals seen %d)", r, err, renewals)
	}
}

func runnerRevoked(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	var lostCalls int
	var mu sync.Mutex
	r, err := fence.Run(ctx, s, "job", func(jctx context.Context) error {
		// An operator's revoke, on its own context: on the job's, the
		// runner's next renewal can see the revoke commit and cancel it
		// before the revoke's answer is read (then "outcome unknown").
		if _, err := s.Revoke(ctx, "job"); err != nil {
			return err
		}
		select {
		case <-jctx.Done():
			return context.Cause(jctx)
		case <-time.After(20 * time.Second):
			return errors.New("job was not cancelled after its lease was revoked")
		}
		// The revoke is seen at the next renewal. A long TTL and renew
		// deadline with frequent renewals: at a TTL of 900 ms a loaded CI
		// machine missed the 600 ms renew deadline before the revoke was seen
		// (and at 3 s it still could).
	}, fence.WithTTL(time.Minute), fence.WithRenewEvery(50*time.Millisecond), fence.WithCallTimeout(20*time.Second), fence.OnLost(func(fence.Token, error) { mu.Lock(); lostCalls++; mu.Unlock() }))
	var le *fence.LostError
	if err != nil || r.Outcome != fence.Lost || !errors.As(r.Err, &le) || le.Reason != fence.LostRevoked {
		t.Fatalf("%+v %v", r, err)
	}
	if !errors.Is(r.JobErr, fence.ErrLost) {
		t.Fatalf("job's ctx cause: %v", r.JobErr)
	}
	if run, _ := s.GetRun(ctx, r.RunID); run.Status != fence.RunLost {
		t.Fatalf("run %+v", run)
	}
	mu.Lock()
	defer mu.Unlock()
	if lostCalls != 1 {
		t.Fatalf("OnLost called %d times", lostCalls)
	}
}

// The database goes away under a running job: renewals fail with transport
// errors, which are retried, and at the renew deadline the job is cancelled
// although no one said the lease was lost.
func runnerUnproven(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	// A renew deadline far below the TTL: the check that the job is cancelled
	// before the lease could lapse holds on a loaded machine (at a TTL of
	// 900 ms the margin was 300 ms of scheduling).
	ttl, deadline := time.Minute, time.Second
	var cancelledAfter time.Duration
	r, err := fence.Run(ctx, s, "job", func(ctx context.Context) error {
		start := time.Now()
		handleFor(s).close()
		<-ctx.Done()
		cancelledAfter = time.Since(start)
		return context.Cause(ctx)
	}, fence.WithTTL(ttl), fence.WithRenewEvery(100*time.Millisecond), fence.WithRenewDeadline(deadline))
	if err != nil || r.Outcome != fence.Lost || !errors.Is(r.Err, fence.ErrUnproven) || !errors.Is(r.Err, fence.ErrLost) {
		t.Fatalf("%+v %v", r, err)
	}
	// Cancelled at the renew deadline after the acquire, before the TTL.
	if cancelledAfter >= ttl {
		t.Fatalf("job cancelled %v after the database went away; the lease could lapse at %v", cancelledAfter, ttl)
	}
}

func runnerFails(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	r, err := fence.Run(ctx, s, "job", func(context.Context) error { return errors.New("upstream 503") })
	if err != nil || r.Outcome != fence.Failed || r.JobErr == nil || r.Err != nil {
		t.Fatalf("%+v %v", r, err)
	}
	if run, _ := s.GetRun(ctx, r.RunID); run.Status != fence.RunFailed || run.Error != "upstream 503" {
		t.Fatalf("run %+v", run)
	}
}

// A takeover between two renewals that the runner has not seen yet: the
// completion itself is the fence and refuses the stale success.
func runnerRejected(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	r, err := fence.Run(ctx, s, "job", func(ctx context.Context) error {
		_, err := s.Revoke(ctx, "job")
		return err
	}, fence.WithTTL(30*time.Second))
	if err != nil || r.Outcome != fence.Rejected || !errors.Is(r.Err, fence.ErrLost) {
		t.Fatalf("%+v %v", r, err)
	}
	if run, _ := s.GetRun(ctx, r.RunID); run.Status != fence.RunLost {
		t.Fatalf("run after rejected completion: %+v", run)
	}
}

// Two replicas schedule one job every second on a clock the test moves:
// at each slot both wake, one runs the job and the other finds the lease
// held. The minimum hold is a minute, so a replica that wakes late (a loaded
// machine) still finds the slot taken; the test ends each hold with a revoke
// once both replicas are asleep again, before it moves to the next slot.
// (On the real clock, 3.5 s for two slots with a 0.5 s hold was a bet on the
// machine's speed.)
func scheduleOnce(t *testing.T, b Backend) {
	p := prefix()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	clk := newStepClock(time.Date(2030, 1, 1, 0, 0, 0, 500_000_000, time.UTC))
	type report struct {
		replica int
		outcome fence.RunOutcome
		err     error
	}
	var mu sync.Mutex
	slots := map[int64][]int{}
	var reports []report
	var wg sync.WaitGroup
	admin := b.Open(t, p)
	for replica := 0; replica < 2; replica++ {
		s := b.Open(t, p, fence.WithClock(clk))
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fence.Schedule(ctx, s, "every-second", "@every 1s", func(ctx context.Context) error {
				slot := clk.Now().Truncate(time.Second).Unix()
				mu.Lock()
				slots[slot] = append(slots[slot], replica)
				mu.Unlock()
				return nil
			}, fence.WithTTL(time.Minute), fence.WithMinHold(time.Minute),
				fence.OnFinished(func(r fence.Result) {
					mu.Lock()
					reports = append(reports, report{replica, r.Outcome, r.Err})
					mu.Unlock()
				}))
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Schedule returned %v", err)
			}
		}()
	}
	waitAsleep := func(what string) {
		t.Helper()
		for clk.sleeping() < 2 {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: the replicas did not both go back to sleep: %v", what, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	const rounds = 3
	for i := range rounds {
		waitAsleep(fmt.Sprintf("before slot %d", i+1))
		// The jitter is at most period/20 (50 ms): both wake at +100 ms.
		clk.advance(clk.Now().Truncate(time.Second).Add(time.Second + 100*time.Millisecond))
		waitAsleep(fmt.Sprintf("after slot %d", i+1))
		mu.Lock()
		got := reports
		reports = nil
		mu.Unlock()
		// OnFinished fires only on the replica that ran the slot (the
		// other found it held and says nothing, as with ShedLock); that
		// it did not run it too is in slots, checked at the end.
		if len(got) != 1 || got[0].outcome != fence.Completed {
			t.Fatalf("slot %d: want one run, reported by the replica that ran it, got %+v", i+1, got)
		}
		// End the winner's minimum hold, so the next slot can be taken.
		if _, err := admin.Revoke(ctx, "every-second"); err != nil {
			t.Fatalf("revoke after slot %d: %v", i+1, err)
		}
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(slots) != rounds {
		t.Fatalf("%d slots ran, want %d: %v", len(slots), rounds, slots)
	}
	for slot, who := range slots {
		if len(who) != 1 {
			t.Fatalf("slot %d ran %d times (replicas %v)", slot, len(who), who)
		}
	}
}
