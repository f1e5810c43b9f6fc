package fencetest

import (
	"context"
	"errors"
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

func runnerRenews(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	r, err := fence.Run(ctx, s, "job", func(ctx context.Context) error {
		select {
		case <-time.After(4500 * time.Millisecond): // three TTLs, about nine renewals
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		// At 600 ms a loaded CI machine saw no renewal answer within the 400 ms
		// renew deadline, and the runner rightly stopped the job.
	}, fence.WithTTL(1500*time.Millisecond))
	if err != nil || r.Outcome != fence.Completed {
		t.Fatalf("%+v %v", r, err)
	}
}

func runnerRevoked(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	var lostCalls int
	var mu sync.Mutex
	r, err := fence.Run(ctx, s, "job", func(ctx context.Context) error {
		if _, err := s.Revoke(ctx, "job"); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(20 * time.Second):
			return errors.New("job was not cancelled after its lease was revoked")
		}
		// 3 s, not less: the revoke is seen at the first renewal (TTL/3), and a
		// loaded CI machine at 900 ms missed the 600 ms renew deadline first.
	}, fence.WithTTL(3*time.Second), fence.OnLost(func(fence.Token, error) { mu.Lock(); lostCalls++; mu.Unlock() }))
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
	ttl := 900 * time.Millisecond
	var cancelledAfter time.Duration
	r, err := fence.Run(ctx, s, "job", func(ctx context.Context) error {
		start := time.Now()
		handleFor(s).close()
		<-ctx.Done()
		cancelledAfter = time.Since(start)
		return context.Cause(ctx)
	}, fence.WithTTL(ttl))
	if err != nil || r.Outcome != fence.Lost || !errors.Is(r.Err, fence.ErrUnproven) || !errors.Is(r.Err, fence.ErrLost) {
		t.Fatalf("%+v %v", r, err)
	}
	// Cancelled at the deadline (2/3 TTL after the acquire), before the TTL.
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

func scheduleOnce(t *testing.T, b Backend) {
	p := prefix()
	ctx, cancel := context.WithTimeout(ctxT(t), 3500*time.Millisecond)
	defer cancel()
	var mu sync.Mutex
	slots := map[int64][]int{}
	var wg sync.WaitGroup
	for replica := 0; replica < 2; replica++ {
		s := b.Open(t, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fence.Schedule(ctx, s, "every-second", "@every 1s", func(ctx context.Context) error {
				slot := time.Now().Truncate(time.Second).Unix()
				mu.Lock()
				slots[slot] = append(slots[slot], replica)
				mu.Unlock()
				return nil
			}, fence.WithTTL(3*time.Second))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Schedule returned %v", err)
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(slots) < 2 {
		t.Fatalf("only %d slots ran in 3.5 s: %v", len(slots), slots)
	}
	for slot, who := range slots {
		if len(who) != 1 {
			t.Fatalf("slot %d ran %d times (replicas %v)", slot, len(who), who)
		}
	}
}
