package fence

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRunResultFields checks every field of Result on a completed and a
// failed run. Duration was always 0: a deferred assignment after `return r`
// changed a copy.
func TestRunResultFields(t *testing.T) {
	s := migratedSQLite(t)
	ctx := context.Background()
	var inJob time.Duration
	before := time.Now()
	r, err := Run(ctx, s, "result:fields", func(ctx context.Context) error {
		tok, ok := TokenFrom(ctx)
		if !ok || tok.Fence <= 0 {
			t.Errorf("TokenFrom: %v %v", tok, ok)
		}
		start := time.Now()
		for time.Since(start) < 20*time.Millisecond {
			time.Sleep(time.Millisecond)
		}
		inJob = time.Since(before)
		return nil
	}, WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case r.Outcome != Completed:
		t.Errorf("Outcome = %q, want completed", r.Outcome)
	case r.Token.Lease != "result:fields" || r.Token.Fence <= 0 || r.Token.Owner == "":
		t.Errorf("Token = %+v", r.Token)
	case r.RunID <= 0:
		t.Errorf("RunID = %d", r.RunID)
	case r.JobErr != nil || r.Err != nil:
		t.Errorf("JobErr = %v, Err = %v", r.JobErr, r.Err)
	case r.Started.Before(before) || r.Started.After(time.Now()):
		t.Errorf("Started = %v, not within the call", r.Started)
	case r.Duration < 20*time.Millisecond || r.Duration > time.Since(before):
		t.Errorf("Duration = %v; the job ran 20ms and finished %v into the call", r.Duration, inJob)
	}

	boom := errors.New("boom")
	r, err = Run(ctx, s, "result:fields", func(context.Context) error { return boom }, WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != Failed || !errors.Is(r.JobErr, boom) || r.Err != nil || r.Duration <= 0 || r.RunID <= 0 {
		t.Errorf("failed run: %+v", r)
	}
	info, err := s.GetRun(ctx, r.RunID)
	if err != nil || info.Status != RunFailed || info.Error != "boom" {
		t.Errorf("run %d: %+v, %v", r.RunID, info, err)
	}
}

// TestRunWithWaitCountsFromAcquisition: a Run that waited longer than the
// renew deadline for the lease must not have its job cancelled at once (the
// deadline was measured from before the wait).
func TestRunWithWaitCountsFromAcquisition(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	s := migratedSQLite(t, WithWaitBackoff(10*time.Millisecond, 100*time.Millisecond))
	ctx := context.Background()
	holder, err := s.Acquire(ctx, "wait:deadline", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second // renew deadline 2 s
	go func() {
		// The waiter must wait past its renew deadline before it can win;
		// this is a lower bound on the wait, not a race with the test.
		time.Sleep(2200 * time.Millisecond)
		_ = s.Release(context.Background(), holder.Token)
	}()
	start := time.Now()
	r, err := Run(ctx, s, "wait:deadline", func(ctx context.Context) error {
		if waited := time.Since(start); waited < 2*time.Second {
			t.Errorf("acquired after %v, before the holder released", waited)
		}
		// A job cancelled at its start sees ctx done within a timer tick.
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(300 * time.Millisecond):
			return nil
		}
	}, WithTTL(ttl), WithWait())
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != Completed {
		t.Fatalf("Outcome = %q (err %v, job %v), want completed: the wait was charged to the renew deadline", r.Outcome, r.Err, r.JobErr)
	}
}

// TestRunPanicRecordsAndReleases: a job's panic reaches the caller, after the
// run is recorded as failed and the lease released (it used to stay running
// and held for the TTL).
func TestRunPanicRecordsAndReleases(t *testing.T) {
	s := migratedSQLite(t)
	ctx := context.Background()
	var fin Result
	var got any
	func() {
		defer func() { got = recover() }()
		_, _ = Run(ctx, s, "panic:job", func(context.Context) error {
			panic("kaboom")
		}, WithTTL(time.Hour), OnFinished(func(r Result) { fin = r }))
	}()
	if got != "kaboom" {
		t.Fatalf("recovered %v, want the job's panic value", got)
	}
	var pe *PanicError
	if !errors.As(fin.JobErr, &pe) || pe.Value != "kaboom" || fin.Outcome != Failed {
		t.Errorf("OnFinished saw %+v", fin)
	}
	info, err := s.GetRun(ctx, fin.RunID)
	if err != nil || info.Status != RunFailed || !strings.Contains(info.Error, "kaboom") {
		t.Errorf("run %d: %+v, %v; want failed with the panic", fin.RunID, info, err)
	}
	// Released, not held for the hour-long TTL.
	if _, err := s.Acquire(ctx, "panic:job", time.Second); err != nil {
		t.Errorf("lease not released after the panic: %v", err)
	}
}

// TestRunHeldLocalFrameWithSkewedClock: the store's injected clock must not
// be mixed with the local time the caller passes as acquiredAt. With +1h the
// job was reported lost on a healthy database at once.
func TestRunHeldLocalFrameWithSkewedClock(t *testing.T) {
	for _, off := range []time.Duration{time.Hour, -time.Hour} {
		s := migratedSQLite(t, WithClock(SkewedClock{Offset: off}))
		ctx := context.Background()
		start := time.Now()
		l, err := s.Acquire(ctx, "skew:runheld", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var lapse time.Time
		r, err := RunHeld(ctx, s, l, start, func(ctx context.Context) error {
			lapse, _ = LapseTime(ctx)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(200 * time.Millisecond):
				return nil
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome != Completed {
			t.Errorf("offset %v: Outcome = %q (%v, job %v), want completed", off, r.Outcome, r.Err, r.JobErr)
		}
		// LapseTime is local time: start + TTL, whatever the store's clock
		// (give or take the reads of two local clocks: earlier is safe).
		if d := lapse.Sub(start.Add(3 * time.Second)); d < -50*time.Millisecond || d > time.Second {
			t.Errorf("offset %v: LapseTime is %v after start+TTL; want local time", off, d)
		}
	}
}

// renewTimes is an Observer that records when each renewal started and when
// the run was recorded, holding StartRun up for a while.
type renewTimes struct {
	mu       sync.Mutex
	acquired time.Time
	renews   []time.Time
	hold     time.Duration
}

func (o *renewTimes) Observe(ctx context.Context, op Op, _ string) (context.Context, func(Event)) {
	now := time.Now()
	switch op {
	case OpAcquire:
		o.mu.Lock()
		o.acquired = now
		o.mu.Unlock()
	case OpStartRun:
		time.Sleep(o.hold) // a slow StartRun round trip
	case OpRenew:
		o.mu.Lock()
		o.renews = append(o.renews, now)
		o.mu.Unlock()
	}
	return ctx, func(Event) {}
}

// TestRunFirstRenewalFromAcquisition: the first renewal is due renewEvery
// after the acquisition, not after StartRun returned.
func TestRunFirstRenewalFromAcquisition(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	obs := &renewTimes{hold: time.Second}
	s := migratedSQLite(t, WithObserver(obs))
	ctx := context.Background()
	r, err := Run(ctx, s, "renew:first", func(ctx context.Context) error {
		for {
			obs.mu.Lock()
			n := len(obs.renews)
			obs.mu.Unlock()
			if n > 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}, WithTTL(3*time.Second), WithRenewEvery(time.Second))
	if err != nil || r.Outcome != Completed {
		t.Fatalf("%+v %v", r, err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	// Due at acquired+1s; with the old schedule it came at acquired+1s+1s.
	// The slack allows a loaded machine to be late, not the old schedule.
	if d := obs.renews[0].Sub(obs.acquired); d > 1600*time.Millisecond {
		t.Errorf("first renewal %v after the acquire; want about the 1s renew interval", d)
	}
}
