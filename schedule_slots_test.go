package fence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/teststore"
)

// parkClock is the system clock, except that a sleep longer than an hour
// (a Schedule waiting for a slot far away) reports itself on parked and
// then waits for ctx: the test knows the replica has decided everything it
// decides before that slot.
type parkClock struct{ parked chan string }

func (parkClock) Now() time.Time { return time.Now() }

func (c parkClock) Sleep(ctx context.Context, d time.Duration) error {
	if d > time.Hour {
		c.parked <- "parked"
		<-ctx.Done()
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// replicas opens n stores on the same tables of b's database, each with
// its own holder name and clock.
func replicas(t *testing.T, b teststore.Backend, n int, clock func(i int) fence.Clock) []*fence.Store {
	t.Helper()
	opts := func(i int) []fence.Option {
		o := []fence.Option{fence.WithHolder(fmt.Sprintf("replica-%d", i))}
		if c := clock(i); c != nil {
			o = append(o, fence.WithClock(c))
		}
		return o
	}
	first, dsn := b.OpenDSN(t, opts(0)...)
	out := []*fence.Store{first}
	for i := 1; i < n; i++ {
		s, err := fencedsn.Open(context.Background(), dsn, append(opts(i), fence.WithPrefix(first.Prefix()))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

// A slot at which every replica was down runs once, late, when replicas
// come back with WithCatchUp: three replicas start at once, and the ledger
// decides, under the lease, that exactly one runs it (the lease is let go
// as soon as the run ends, so a replica that read the ledger before the run
// started and acquires after it ended must read it again). Started again, they
// find the slot's run in the ledger and run nothing. Without WithCatchUp
// nothing runs.
func TestScheduleCatchUpRunsMissedSlotOnce(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		parked := make(chan string, 8)
		stores := replicas(t, b, 3, func(int) fence.Clock { return parkClock{parked} })
		const name = "yearly-report"
		var ran atomic.Int32
		job := func(context.Context) error { ran.Add(1); return nil }
		// Once a year, at New Year (UTC): the last slot is months ago, the
		// next months ahead.
		round := func(opts ...fence.RunOption) {
			t.Helper()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for _, s := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := fence.Schedule(ctx, s, name, "0 0 1 1 *", job,
						append([]fence.RunOption{fence.WithTTL(5 * time.Second), fence.WithTimeZone(time.UTC), fence.WithMinHold(time.Millisecond)}, opts...)...)
					if !errors.Is(err, context.Canceled) {
						t.Errorf("Schedule: %v", err)
					}
				}()
			}
			for range stores {
				select {
				case <-parked:
				case <-time.After(time.Minute):
					t.Fatal("a replica did not reach its wait for the next slot within a minute")
				}
			}
			cancel()
			wg.Wait()
		}

		round()
		if n := ran.Load(); n != 0 {
			t.Fatalf("without WithCatchUp the missed slot ran %d times", n)
		}
		round(fence.WithCatchUp(400 * 24 * time.Hour))
		runs, err := stores[0].Runs(context.Background(), fence.RunFilter{Lease: name})
		if err != nil {
			t.Fatal(err)
		}
		if n := ran.Load(); n != 1 || len(runs) != 1 || runs[0].Status != fence.RunSucceeded {
			t.Fatalf("replicas catching up: the job ran %d times, the ledger has %+v; want once", n, runs)
		}
		round(fence.WithCatchUp(400 * 24 * time.Hour))
		if n := ran.Load(); n != 1 {
			t.Errorf("the slot ran again (%d runs) though the ledger has its run", n)
		}
		// A window that does not reach back to the slot: nothing to do.
		if _, err := stores[0].PruneRuns(context.Background(), name, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		round(fence.WithCatchUp(time.Hour))
		if n := ran.Load(); n != 1 && time.Now().UTC().YearDay() > 1 {
			t.Errorf("a slot outside the catch-up window ran (%d runs)", n)
		}
	})
}

// A slot whose job failed runs again, backoff apart, up to the count of
// WithRetry; each attempt is a run in the ledger.
func TestScheduleRetriesFailedSlot(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		const name = "flaky"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var attempts atomic.Int32
		var mu sync.Mutex
		var outcomes []fence.RunOutcome
		err := fence.Schedule(ctx, s, name, "*/4 * * * * *", func(context.Context) error {
			if attempts.Add(1) < 3 {
				return errors.New("upstream not ready")
			}
			return nil
		}, fence.WithTTL(3*time.Second), fence.WithRetry(2, 100*time.Millisecond), fence.OnFinished(func(r fence.Result) {
			mu.Lock()
			outcomes = append(outcomes, r.Outcome)
			mu.Unlock()
			if r.Outcome == fence.Completed {
				cancel()
			}
		}))
		if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		runs, err := s.Runs(context.Background(), fence.RunFilter{Lease: name})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range runs {
			got = append([]string{string(r.Status)}, got...)
		}
		if strings.Join(got, ",") != "failed,failed,succeeded" {
			t.Errorf("runs of the slot: %v, want failed,failed,succeeded", got)
		}
		if len(outcomes) != 3 || outcomes[2] != fence.Completed {
			t.Errorf("OnFinished saw %v", outcomes)
		}
		if err := fence.Schedule(ctx, s, name, "@every 5s", nil, fence.WithRetry(1, 0)); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("WithRetry(1, 0): %v, want ErrInvalid", err)
		}
	})
}

// OnFinished fires only on the replica that ran a slot: two replicas on a
// per-second schedule, and every call is a run in the ledger, none a
// NotAcquired. (It fired on every replica at every slot.)
func TestScheduleOnFinishedOnlyOnRunner(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		stores := replicas(t, b, 2, func(int) fence.Clock { return nil })
		const name = "every-second"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var mu sync.Mutex
		var results []fence.Result
		var wg sync.WaitGroup
		for _, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = fence.Schedule(ctx, s, name, "* * * * * *", func(context.Context) error { return nil },
					fence.WithTTL(3*time.Second), fence.OnFinished(func(r fence.Result) {
						mu.Lock()
						results = append(results, r)
						n := 0
						for _, x := range results {
							if x.RunID != 0 {
								n++
							}
						}
						mu.Unlock()
						if n >= 2 {
							cancel()
						}
					}))
			}()
		}
		wg.Wait()
		runs, err := stores[0].Runs(context.Background(), fence.RunFilter{Lease: name})
		if err != nil {
			t.Fatal(err)
		}
		withRun := 0
		for _, r := range results {
			if r.Outcome == fence.NotAcquired {
				t.Errorf("OnFinished on a replica that did not run the slot: %+v", r)
			}
			if r.RunID != 0 {
				withRun++
			}
		}
		if withRun != len(runs) {
			t.Errorf("%d OnFinished calls with a run, %d runs in the ledger", withRun, len(runs))
		}
	})
}
