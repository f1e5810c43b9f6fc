package fencegocron_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencegocron"
	"github.com/fencekit/fence/internal/teststore"
)

func TestOptionsValidated(t *testing.T) {
	s := teststore.Backends[0].Open(t)
	bad := []struct {
		name string
		opts []fencegocron.Option
	}{
		{"ttl zero", []fencegocron.Option{fencegocron.WithTTL(0)}},
		{"deadline not below ttl", []fencegocron.Option{fencegocron.WithTTL(time.Second), fencegocron.WithRenewDeadline(time.Second)}},
		{"renew not below deadline", []fencegocron.Option{fencegocron.WithTTL(time.Second), fencegocron.WithRenewEvery(700 * time.Millisecond)}},
		{"negative min hold", []fencegocron.Option{fencegocron.WithMinHold(-time.Second)}},
		{"control character in prefix", []fencegocron.Option{fencegocron.WithKeyPrefix("a\x00")}},
	}
	for _, c := range bad {
		if _, err := fencegocron.NewLocker(s, c.opts...); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("NewLocker with %s: err = %v, want ErrInvalid", c.name, err)
		}
	}
	if _, err := fencegocron.NewLocker(nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("NewLocker(nil): err = %v, want ErrInvalid", err)
	}
	if _, err := fencegocron.NewElector(s, ""); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("NewElector with no name: err = %v, want ErrInvalid", err)
	}
	if _, err := fencegocron.NewLocker(s); err != nil {
		t.Errorf("NewLocker with defaults: %v", err)
	}
}

// A task from Job claims the locks Lock filed under its context oldest
// first, each at most once, and none after Unlock.
func TestLockerJobClaimsEachLockOnce(t *testing.T) {
	s := teststore.Backends[0].Open(t)
	l, err := fencegocron.NewLocker(s, fencegocron.WithMinHold(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background()) // what gocron passes: one context per job
	defer cancel()
	var got []string
	task := l.Job(func(_ context.Context, tok fence.Token) error {
		got = append(got, tok.Lease)
		return nil
	})
	a, err := l.Lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := task(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := task(ctx); !errors.Is(err, fencegocron.ErrNotLocked) {
		t.Errorf("third task: err = %v, want ErrNotLocked", err)
	}
	if err := task(context.Background()); !errors.Is(err, fencegocron.ErrNotLocked) {
		t.Errorf("task under another context: err = %v, want ErrNotLocked", err)
	}
	if len(got) != 2 || got[0] != "gocron:a" || got[1] != "gocron:b" {
		t.Errorf("tasks ran with %v, want [gocron:a gocron:b]", got)
	}
	for _, lk := range []gocron.Lock{a, b} {
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Unlock(ctx); err != nil {
		t.Errorf("second Unlock: %v, want the first's result (nil)", err)
	}
}

// A run shorter than the min hold keeps the lease until the hold ends, so
// a scheduler whose timer fires a little later cannot run the slot again;
// then the lease is free.
func TestLockerKeepsLeaseForMinHold(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		c := newCluster(t, b)
		const hold = 700 * time.Millisecond
		la, _ := fencegocron.NewLocker(c.replica(t), fencegocron.WithMinHold(hold))
		lb, _ := fencegocron.NewLocker(c.replica(t), fencegocron.WithMinHold(hold))
		ctx := context.Background()

		start := time.Now()
		lk, err := la.Lock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lb.Lock(ctx, "k"); !errors.Is(err, fence.ErrHeld) {
			t.Fatalf("second scheduler while held: err = %v, want ErrHeld", err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = lb.Lock(ctx, "k")
		if elapsed := time.Since(start); elapsed < hold-200*time.Millisecond && !errors.Is(err, fence.ErrHeld) {
			t.Fatalf("second scheduler %v after the first locked, within the min hold, after Unlock: err = %v, want ErrHeld", elapsed, err)
		}
		var got gocron.Lock
		waitFor(5*time.Second, func() bool {
			got, err = lb.Lock(ctx, "k")
			return err == nil
		})
		if err != nil {
			t.Fatalf("lease still held after the min hold: %v", err)
		}
		if elapsed := time.Since(start); elapsed < hold-50*time.Millisecond {
			t.Errorf("second scheduler got the lease %v after the first locked, before the min hold %v", elapsed, hold)
		}
		got.Unlock(ctx)
	})
}

// A long run keeps its lease: it is renewed while the job runs (the job
// waits until it has seen the expiry move forward three times), the other
// scheduler is refused throughout, the run's fenced write is accepted, and
// Unlock after the min hold releases at once. The TTL is a minute with
// renewals every 50 ms: at a TTL of 600 ms a loaded machine answered no
// renewal within the 400 ms renew deadline, and the run was rightly stopped.
func TestLockerRenewsLongRun(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		c := newCluster(t, b)
		tbl := c.counter(t)
		sa := c.replica(t)
		opts := []fencegocron.Option{fencegocron.WithTTL(time.Minute), fencegocron.WithRenewEvery(50 * time.Millisecond), fencegocron.WithMinHold(0)}
		la, _ := fencegocron.NewLocker(sa, opts...)
		lb, _ := fencegocron.NewLocker(c.replica(t), opts...)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		lk, err := la.Lock(ctx, "long")
		if err != nil {
			t.Fatal(err)
		}
		err = la.Job(func(ctx context.Context, tok fence.Token) error {
			first, err := c.admin.Get(ctx, tok.Lease)
			if err != nil {
				return err
			}
			last := first.ExpiresAt
			for renewals := 0; renewals < 3 && ctx.Err() == nil; {
				if _, err := lb.Lock(ctx, "long"); !errors.Is(err, fence.ErrHeld) {
					t.Errorf("other scheduler during the run: err = %v, want ErrHeld", err)
				}
				time.Sleep(10 * time.Millisecond) // a poll: the renewals are counted, not timed
				info, err := c.admin.Get(ctx, tok.Lease)
				if err != nil {
					return err
				}
				if info.Fence != tok.Fence {
					t.Fatalf("lease changed hands during the run: %+v", info)
				}
				if info.ExpiresAt.After(last) {
					renewals++
					last = info.ExpiresAt
				}
			}
			if ctx.Err() != nil {
				t.Errorf("job context cancelled while the lease was renewed: %v", context.Cause(ctx))
			}
			return bump(ctx, sa, tbl, tok)
		})(ctx)
		if err != nil {
			t.Fatalf("long run: %v", err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		next, err := lb.Lock(ctx, "long")
		if err != nil {
			t.Fatalf("after Unlock past the min hold the lease should be free: %v", err)
		}
		next.Unlock(ctx)
		if n, _ := readCounter(t, c, tbl); n != 1 {
			t.Errorf("counter = %d, want 1", n)
		}
	})
}

// When the lease is lost during a run (here revoked by an operator), the
// job's context is cancelled with the cause, its fenced write is refused,
// and the task and Unlock report the loss.
func TestLockerLostLeaseCancelsRun(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		c := newCluster(t, b)
		tbl := c.counter(t)
		sa := c.replica(t)
		// The revocation is seen at the next renewal (every 50 ms); the TTL and
		// renew deadline are long so that a slow renewal on a loaded machine
		// cannot end the run as unproven first (at 900 ms it could).
		la, _ := fencegocron.NewLocker(sa, fencegocron.WithTTL(time.Minute), fencegocron.WithRenewEvery(50*time.Millisecond))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		lk, err := la.Lock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		err = la.Job(func(jctx context.Context, tok fence.Token) error {
			if _, err := c.admin.Revoke(ctx, tok.Lease); err != nil {
				t.Fatal(err)
			}
			select {
			case <-jctx.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("job context not cancelled within 30s of the revocation")
			}
			if cause := context.Cause(jctx); !errors.Is(cause, fence.ErrLost) {
				t.Errorf("cancellation cause = %v, want ErrLost", cause)
			}
			if err := bump(context.WithoutCancel(jctx), sa, tbl, tok); !errors.Is(err, fence.ErrLost) {
				t.Errorf("fenced write after the loss: err = %v, want ErrLost", err)
			}
			return nil // a job that ignores its losses
		})(ctx)
		if !errors.Is(err, fence.ErrLost) {
			t.Errorf("task: err = %v, want ErrLost although the job returned nil", err)
		}
		if err := lk.Unlock(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Unlock: err = %v, want ErrLost", err)
		}
		if n, _ := readCounter(t, c, tbl); n != 0 {
			t.Errorf("counter = %d, want 0", n)
		}
		runs, err := c.admin.Runs(ctx, fence.RunFilter{Lease: "gocron:k"})
		if err != nil || len(runs) != 1 || runs[0].Status != fence.RunLost {
			t.Errorf("run ledger after a lost run: %+v %v; want one lost run", runs, err)
		}
	})
}

// Two gocron schedulers share one database and run the same job every
// second; each slot runs on exactly one of them.
func TestLockerTwoSchedulersRunEachSlotOnce(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		c := newCluster(t, b)
		tbl := c.counter(t)
		var runs journal
		var refused atomic.Int64
		scheds := make([]gocron.Scheduler, 2)
		for i := range scheds {
			st := c.replica(t)
			l, err := fencegocron.NewLocker(st, fencegocron.WithTTL(3*time.Second), fencegocron.WithMinHold(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
			if err != nil {
				t.Fatal(err)
			}
			scheds[i] = sc
			_, err = sc.NewJob(gocron.CronJob("* * * * * *", true),
				gocron.NewTask(l.Job(func(ctx context.Context, tok fence.Token) error {
					at := time.Now()
					if err := bump(ctx, st, tbl, tok); err != nil {
						t.Errorf("scheduler %d: fenced write of fence %d: %v", i, tok.Fence, err)
						return err
					}
					runs.add(execution{sched: i, at: at, fence: tok.Fence})
					time.Sleep(50 * time.Millisecond) // the work
					return nil
				})),
				gocron.WithName("report"),
				gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
					switch {
					case errors.Is(err, fence.ErrHeld):
						refused.Add(1)
					case errors.Is(err, context.Canceled):
						// A slot that fired as the scheduler shut down.
					default:
						t.Errorf("scheduler %d: lock failed for another reason than ErrHeld: %v", i, err)
					}
				})))
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, sc := range scheds {
			sc.Start()
		}
		waitFor(10*time.Second, func() bool { return runs.len() >= 4 })
		for _, sc := range scheds {
			if err := sc.Shutdown(); err != nil {
				t.Error(err)
			}
		}

		got := runs.sorted()
		checkOnePerSlot(t, got, 3)
		for i := 1; i < len(got); i++ {
			if got[i].fence <= got[i-1].fence {
				t.Errorf("fence %d of a later run is not above %d", got[i].fence, got[i-1].fence)
			}
		}
		if refused.Load() == 0 {
			t.Error("no lock was refused: the schedulers did not compete for the slots")
		}
		if n, _ := readCounter(t, c, tbl); n != len(got) {
			t.Errorf("counter = %d, want one accepted write per run (%d)", n, len(got))
		}
		t.Logf("%d runs, %d refused locks", len(got), refused.Load())
	})
}

type pausedRun struct {
	tok      fence.Token
	cause    error // why its context was cancelled, as seen on resuming
	err      error // its fenced write after resuming
	takeover int64 // the fence of the run that took over
}

// The winning scheduler's run pauses (its whole process: renewals too)
// past the lease's TTL, the other scheduler takes the next slot, and when
// the paused run resumes its fenced write is refused and changes nothing.
func TestLockerPausedRunCannotComplete(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		c := newCluster(t, b)
		tbl := c.counter(t)
		var (
			pausing  atomic.Bool
			accepted atomic.Int64
			tookOver = make(chan int64, 1)
			paused   = make(chan pausedRun, 1)
			gates    = [2]*gate{{}, {}}
			scheds   = make([]gocron.Scheduler, 2)
		)
		for i := range scheds {
			st := c.replica(t, fence.WithObserver(gates[i]))
			l, err := fencegocron.NewLocker(st, fencegocron.WithTTL(1500*time.Millisecond), fencegocron.WithMinHold(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := gocron.NewScheduler(gocron.WithDistributedLocker(l), gocron.WithStopTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			scheds[i] = sc
			_, err = sc.NewJob(gocron.CronJob("* * * * * *", true),
				gocron.NewTask(l.Job(func(ctx context.Context, tok fence.Token) error {
					if pausing.CompareAndSwap(false, true) {
						// This process freezes until another one took over.
						gates[i].close()
						var f int64
						select {
						case f = <-tookOver:
						case <-time.After(10 * time.Second):
						}
						gates[i].open()
						r := pausedRun{tok: tok, cause: context.Cause(ctx), takeover: f}
						// The worst case: a worker that ignores its
						// cancellation and writes anyway.
						r.err = bump(context.WithoutCancel(ctx), st, tbl, tok)
						paused <- r
						return r.err
					}
					if err := bump(ctx, st, tbl, tok); err != nil {
						return err
					}
					accepted.Add(1)
					select {
					case tookOver <- tok.Fence:
					default:
					}
					return nil
				})),
				gocron.WithName("report"))
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, sc := range scheds {
			sc.Start()
		}
		var r pausedRun
		select {
		case r = <-paused:
		case <-time.After(15 * time.Second):
			gates[0].open()
			gates[1].open()
			t.Fatal("no paused run finished within 15s")
		}
		for _, sc := range scheds {
			if err := sc.Shutdown(); err != nil {
				t.Error(err)
			}
		}

		if r.takeover == 0 {
			t.Fatal("no other scheduler took over while the run was paused")
		}
		if r.takeover <= r.tok.Fence {
			t.Errorf("takeover fence %d is not above the paused run's %d", r.takeover, r.tok.Fence)
		}
		if !errors.Is(r.err, fence.ErrLost) {
			t.Fatalf("paused run's fenced write: err = %v, want ErrLost", r.err)
		}
		var lost *fence.LostError
		if errors.As(r.err, &lost) && lost.Current != 0 && lost.Current < r.takeover {
			t.Errorf("LostError says the lease is at fence %d, below the takeover's %d", lost.Current, r.takeover)
		}
		if !errors.Is(r.cause, fence.ErrLost) {
			t.Errorf("paused run's context: cause = %v, want one wrapping ErrLost", r.cause)
		}
		n, last := readCounter(t, c, tbl)
		if int64(n) != accepted.Load() || last == r.tok.Fence {
			t.Errorf("counter n=%d last=%d: want n=%d accepted writes and last not the paused fence %d", n, last, accepted.Load(), r.tok.Fence)
		}
		t.Logf("paused fence %d refused (%v); takeover fence %d; %d accepted writes", r.tok.Fence, r.err, r.takeover, n)
	})
}

// Each locked run is in the run ledger with the lease's fence: a task from
// Job with its own outcome (succeeded, or failed with its error), any other
// task succeeded once gocron unlocks it.
func TestLockerRecordsRunOutcomes(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		c := newCluster(t, b)
		l, _ := fencegocron.NewLocker(c.replica(t), fencegocron.WithMinHold(0))
		ctx := context.Background()
		lockRun := func(key string, task func(ctx context.Context) error) fence.RunInfo {
			t.Helper()
			jctx, cancel := context.WithCancel(ctx) // gocron's job context
			defer cancel()
			lk, err := l.Lock(jctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if task != nil {
				_ = task(jctx)
			}
			if err := lk.Unlock(jctx); err != nil {
				t.Fatal(err)
			}
			runs, err := c.admin.Runs(ctx, fence.RunFilter{Lease: "gocron:" + key})
			if err != nil || len(runs) != 1 {
				t.Fatalf("runs of %q: %+v %v; want one", key, runs, err)
			}
			return runs[0]
		}
		var tok fence.Token
		ok := lockRun("ok", l.Job(func(_ context.Context, tk fence.Token) error { tok = tk; return nil }))
		if ok.Status != fence.RunSucceeded || ok.Fence != tok.Fence {
			t.Errorf("run of a task that returned nil: %+v; want succeeded with fence %d", ok, tok.Fence)
		}
		failed := lockRun("failed", l.Job(func(context.Context, fence.Token) error { return errors.New("upstream 503") }))
		if failed.Status != fence.RunFailed || failed.Error != "upstream 503" {
			t.Errorf("run of a task that failed: %+v; want failed with its error", failed)
		}
		plain := lockRun("plain", nil)
		if plain.Status != fence.RunSucceeded {
			t.Errorf("run of a task not from Job: %+v; want succeeded (ended with the lease held)", plain)
		}
		panicked := lockRun("panicked", func(ctx context.Context) error {
			defer func() { _ = recover() }() // gocron recovers a task's panic
			return l.Job(func(context.Context, fence.Token) error { panic("boom") })(ctx)
		})
		if panicked.Status != fence.RunFailed || !strings.Contains(panicked.Error, "boom") {
			t.Errorf("run of a task that panicked: %+v; want failed with the panic", panicked)
		}
	})
}

// Two gocron schedulers with a Locker each on one database run a job every
// second: every run that took place is one row of the run ledger, with its
// own fence and the outcome the task returned.
func TestLockerRunsInLedger(t *testing.T) {
	teststore.EachOf(t, []teststore.Backend{teststore.SQLite, teststore.Postgres}, func(t *testing.T, b teststore.Backend) {
		c := newCluster(t, b)
		var mu sync.Mutex
		ran := map[int64]bool{} // fence → whether the run failed
		scheds := make([]gocron.Scheduler, 2)
		for i := range scheds {
			l, err := fencegocron.NewLocker(c.replica(t), fencegocron.WithTTL(3*time.Second), fencegocron.WithMinHold(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
			if err != nil {
				t.Fatal(err)
			}
			scheds[i] = sc
			_, err = sc.NewJob(gocron.CronJob("* * * * * *", true),
				gocron.NewTask(l.Job(func(ctx context.Context, tok fence.Token) error {
					mu.Lock()
					fail := len(ran)%2 == 1
					ran[tok.Fence] = fail
					mu.Unlock()
					if fail {
						return errors.New("odd run")
					}
					return nil
				})),
				gocron.WithName("report"))
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, sc := range scheds {
			sc.Start()
		}
		waitFor(20*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(ran) >= 3
		})
		for _, sc := range scheds {
			if err := sc.Shutdown(); err != nil {
				t.Error(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ran) < 3 {
			t.Fatalf("%d runs in 20s, want at least 3", len(ran))
		}
		var runs []fence.RunInfo
		// Shutdown waits for running jobs, and Unlock follows each task;
		// wait all the same for the last completion to be visible.
		waitFor(10*time.Second, func() bool {
			var err error
			runs, err = c.admin.Runs(context.Background(), fence.RunFilter{Lease: "gocron:report"})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				if r.Status == fence.RunRunning {
					return false
				}
			}
			return true
		})
		if len(runs) != len(ran) {
			t.Errorf("%d runs in the ledger, %d took place: %+v", len(runs), len(ran), runs)
		}
		seen := map[int64]bool{}
		for _, r := range runs {
			fail, ok := ran[r.Fence]
			switch {
			case seen[r.Fence]:
				t.Errorf("two runs in the ledger with fence %d", r.Fence)
			case !ok:
				t.Errorf("run %+v in the ledger did not take place", r)
			case fail && (r.Status != fence.RunFailed || r.Error != "odd run"):
				t.Errorf("run %+v: want failed with the task's error", r)
			case !fail && r.Status != fence.RunSucceeded:
				t.Errorf("run %+v: want succeeded", r)
			}
			seen[r.Fence] = true
		}
		t.Logf("%d runs, %d rows in the ledger", len(ran), len(runs))
	})
}
