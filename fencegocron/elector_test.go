package fencegocron_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencegocron"
	"github.com/fencekit/fence/internal/teststore"
)

// run starts e.Run and returns a function that stops it and returns its
// error.
func run(t *testing.T, e *fencegocron.Elector) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once atomic.Bool
	var err error
	stop = func() error {
		if once.CompareAndSwap(false, true) {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("Run did not return within 10s of its context ending")
			}
		}
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

func leads(e *fencegocron.Elector) bool { return e.IsLeader(context.Background()) == nil }

// countingElector counts the runs an Elector refused.
type countingElector struct {
	*fencegocron.Elector
	refused atomic.Int64
}

func (c *countingElector) IsLeader(ctx context.Context) error {
	err := c.Elector.IsLeader(ctx)
	if err != nil {
		c.refused.Add(1)
	}
	return err
}

// Two gocron schedulers with electors on one database: only the leader's
// runs the job, once per slot, with the term's token.
func TestElectorOnlyLeaderRuns(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		c := newCluster(t, b)
		tbl := c.counter(t)
		var runs journal
		electors := make([]*countingElector, 2)
		scheds := make([]gocron.Scheduler, 2)
		for i := range scheds {
			st := c.replica(t)
			e, err := fencegocron.NewElector(st, "gocron-leader", fencegocron.WithTTL(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			electors[i] = &countingElector{Elector: e}
			run(t, e)
			sc, err := gocron.NewScheduler(gocron.WithDistributedElector(electors[i]))
			if err != nil {
				t.Fatal(err)
			}
			scheds[i] = sc
			_, err = sc.NewJob(gocron.CronJob("* * * * * *", true),
				gocron.NewTask(e.Job(func(ctx context.Context, tok fence.Token) error {
					at := time.Now()
					if err := bump(ctx, st, tbl, tok); err != nil {
						t.Errorf("scheduler %d: fenced write of fence %d: %v", i, tok.Fence, err)
						return err
					}
					runs.add(execution{sched: i, at: at, fence: tok.Fence})
					return nil
				})),
				gocron.WithName("report"))
			if err != nil {
				t.Fatal(err)
			}
		}
		if !waitFor(5*time.Second, func() bool { return leads(electors[0].Elector) || leads(electors[1].Elector) }) {
			t.Fatal("no leader within 5s")
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
		leader := got[0].sched
		tok, _ := electors[leader].Token()
		for _, r := range got {
			if r.sched != leader || r.fence != tok.Fence {
				t.Errorf("run on scheduler %d with fence %d; want only the leader, scheduler %d, with its term's fence %d", r.sched, r.fence, leader, tok.Fence)
			}
		}
		if electors[1-leader].refused.Load() == 0 {
			t.Error("the follower's scheduler never asked to run")
		}
		if electors[leader].refused.Load() != 0 {
			t.Errorf("the leader refused %d runs", electors[leader].refused.Load())
		}
		t.Logf("%d runs on the leader, %d refused on the follower", len(got), electors[1-leader].refused.Load())
	})
}

// A leader that dies (its database connection gone, so it can neither
// renew nor release) stops saying it leads within the renew deadline; the
// other becomes leader only after the TTL, never both at once; the dead
// leader's running job is cancelled, and its token can no longer write.
func TestElectorFailover(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		// Renewals far more often than the renew deadline, and the deadline
		// far below the TTL: at a TTL of 1.5 s (renewal every 0.5 s, deadline
		// 1 s) a loaded machine could miss the deadline while a was healthy.
		const (
			ttl        = 6 * time.Second
			renewEvery = 100 * time.Millisecond
			deadline   = 3 * time.Second
		)
		opts := []fencegocron.Option{fencegocron.WithTTL(ttl), fencegocron.WithRenewEvery(renewEvery), fencegocron.WithRenewDeadline(deadline)}
		c := newCluster(t, b)
		tbl := c.counter(t)
		sa := c.replica(t)
		a, _ := fencegocron.NewElector(sa, "leader", opts...)
		bb, _ := fencegocron.NewElector(c.replica(t), "leader", opts...)
		stopA := run(t, a)
		if !waitFor(5*time.Second, func() bool { return leads(a) }) {
			t.Fatal("a did not become leader")
		}
		run(t, bb)
		time.Sleep(2 * renewEvery)
		if leads(bb) {
			t.Fatal("b leads while a holds the lease")
		}
		tokA, _ := a.Token()

		// A job a started while it led, still running at its death.
		jobCause := make(chan error, 1)
		jobStarted := make(chan struct{})
		go a.Job(func(ctx context.Context, _ fence.Token) error {
			close(jobStarted)
			select {
			case <-ctx.Done():
				jobCause <- context.Cause(ctx)
			case <-time.After(10 * time.Second):
				jobCause <- nil
			}
			return nil
		})(context.Background())
		<-jobStarted

		sa.Close()
		killed := time.Now()
		var aGone, bLeads time.Time
		for aGone.IsZero() || bLeads.IsZero() {
			la, lb := leads(a), leads(bb)
			now := time.Now()
			if la && lb {
				t.Fatalf("both lead %v after the kill", now.Sub(killed))
			}
			if !la && aGone.IsZero() {
				aGone = now
			}
			if lb && bLeads.IsZero() {
				bLeads = now
			}
			if now.Sub(killed) > 10*time.Second {
				t.Fatalf("after 10s: a gone %v, b leads %v", !aGone.IsZero(), !bLeads.IsZero())
			}
			time.Sleep(5 * time.Millisecond)
		}
		// a stops leading before b can lead (the loop above also failed if
		// both led at once); how soon after the deadline depends on the
		// machine's load, so it is logged, not asserted.
		if aGone.After(bLeads) {
			t.Errorf("a still said it led %v after its death, after b led at %v", aGone.Sub(killed), bLeads.Sub(killed))
		}
		// The lease lapses no sooner than TTL after a's last renewal, which
		// began about one renew interval (plus the call) before the kill;
		// a release would have let b in at once.
		if d := bLeads.Sub(killed); d < ttl-renewEvery-300*time.Millisecond {
			t.Errorf("b led %v after a's death, before a's lease could lapse", d)
		}
		tokB, ok := bb.Token()
		if !ok || tokB.Fence <= tokA.Fence {
			t.Errorf("b's term fence %d (ok %v) is not above a's %d", tokB.Fence, ok, tokA.Fence)
		}
		select {
		case cause := <-jobCause:
			if !errors.Is(cause, fence.ErrLost) {
				t.Errorf("a's running job: cancellation cause %v, want one wrapping ErrLost", cause)
			}
		case <-time.After(5 * time.Second):
			t.Error("a's running job was not cancelled")
		}
		if err := bump(context.Background(), c.admin, tbl, tokA); !errors.Is(err, fence.ErrLost) {
			t.Errorf("write with the dead leader's token: err = %v, want ErrLost", err)
		}
		if err := bump(context.Background(), c.admin, tbl, tokB); err != nil {
			t.Errorf("write with the new leader's token: %v", err)
		}
		if err := stopA(); !errors.Is(err, context.Canceled) {
			t.Errorf("a.Run returned %v, want context.Canceled", err)
		}
		if err := a.IsLeader(context.Background()); !errors.Is(err, fencegocron.ErrNotLeader) {
			t.Errorf("dead leader's IsLeader = %v, want ErrNotLeader", err)
		}
		t.Logf("a stopped leading after %v, b led after %v (ttl %v)", aGone.Sub(killed).Round(time.Millisecond), bLeads.Sub(killed).Round(time.Millisecond), ttl)
	})
}

// A leader whose Run ends steps down at once: it releases the lease, so
// the other takes over long before the TTL.
func TestElectorStepsDown(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		c := newCluster(t, b)
		opts := []fencegocron.Option{fencegocron.WithTTL(10 * time.Second), fencegocron.WithRenewEvery(200 * time.Millisecond)}
		a, _ := fencegocron.NewElector(c.replica(t), "leader", opts...)
		bb, _ := fencegocron.NewElector(c.replica(t), "leader", opts...)
		stopA := run(t, a)
		if !waitFor(5*time.Second, func() bool { return leads(a) }) {
			t.Fatal("a did not become leader")
		}
		if err := a.Run(context.Background()); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("second concurrent Run: err = %v, want ErrInvalid", err)
		}
		run(t, bb)
		time.Sleep(300 * time.Millisecond)
		if leads(bb) {
			t.Fatal("b leads while a holds the lease")
		}
		start := time.Now()
		if err := stopA(); !errors.Is(err, context.Canceled) {
			t.Errorf("a.Run returned %v, want context.Canceled", err)
		}
		if leads(a) {
			t.Error("a still leads after its Run returned")
		}
		if !waitFor(3*time.Second, func() bool { return leads(bb) }) {
			t.Fatal("b did not take over within 3s of a stepping down (TTL 10s)")
		}
		t.Logf("b took over %v after a stepped down", time.Since(start).Round(time.Millisecond))
	})
}
