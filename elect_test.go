package fence

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/testdb"
)

func TestElectValidates(t *testing.T) {
	s := migratedSQLite(t)
	ctx := context.Background()
	ok := ElectionCallbacks{OnStartedLeading: func(context.Context, Token) {}}
	for name, err := range map[string]error{
		"nil store":        Elect(ctx, nil, "a", ok),
		"no leader func":   Elect(ctx, s, "a", ElectionCallbacks{}),
		"bad name":         Elect(ctx, s, "", ok),
		"tiny retry":       Elect(ctx, s, "a", ok, WithRetryPeriod(time.Microsecond)),
		"deadline too big": Elect(ctx, s, "a", ok, WithTTL(time.Second), WithRenewDeadline(time.Second)),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// electRecorder runs Elect in the background and hands over what its
// callbacks saw.
type electRecorder struct {
	newLeader chan int64
	started   chan Token
	ended     chan error // context.Cause of each term's ctx
	stopped   chan struct{}
	done      chan error    // Elect's result
	returned  chan struct{} // closed when Elect returned
	cancel    context.CancelFunc
}

func startElect(t *testing.T, s *Store, lead func(ctx context.Context, tok Token), opts ...RunOption) *electRecorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &electRecorder{
		newLeader: make(chan int64, 100), started: make(chan Token, 100), ended: make(chan error, 100),
		stopped: make(chan struct{}, 100), done: make(chan error, 1), returned: make(chan struct{}), cancel: cancel,
	}
	if lead == nil {
		lead = func(ctx context.Context, tok Token) { <-ctx.Done() }
	}
	cb := ElectionCallbacks{
		OnNewLeader: func(_ string, f int64) { r.newLeader <- f },
		OnStartedLeading: func(ctx context.Context, tok Token) {
			r.started <- tok
			lead(ctx, tok)
			<-ctx.Done()
			r.ended <- context.Cause(ctx)
		},
		OnStoppedLeading: func() { r.stopped <- struct{}{} },
	}
	go func() {
		defer close(r.returned)
		r.done <- Elect(ctx, s, "leader", cb, opts...)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.returned:
		case <-time.After(30 * time.Second):
			t.Error("Elect did not return within 30s of its ctx ending")
		}
	})
	return r
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
		panic("unreachable")
	}
}

// A refused renewal ends the term — the leader's ctx is cancelled with the
// refusal — and Elect campaigns again, for a term with a higher fence.
func TestElectCampaignsAgainAfterLosing(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	s := migratedSQLite(t)
	r := startElect(t, s, nil, WithTTL(3*time.Second), WithRetryPeriod(50*time.Millisecond))
	first := recv(t, r.started, "first term")
	if f := recv(t, r.newLeader, "OnNewLeader for the first term"); f != first.Fence {
		t.Fatalf("OnNewLeader fence %d, the term's %d", f, first.Fence)
	}
	if _, err := s.Revoke(context.Background(), "leader"); err != nil {
		t.Fatal(err)
	}
	var le *LostError
	if cause := recv(t, r.ended, "end of the first term"); !errors.As(cause, &le) || le.Reason != LostRevoked {
		t.Fatalf("first term ended with %v, want the revoke", cause)
	}
	recv(t, r.stopped, "OnStoppedLeading")
	second := recv(t, r.started, "second term")
	if second.Fence <= first.Fence {
		t.Fatalf("second term fence %d not above the first's %d", second.Fence, first.Fence)
	}
	if f := recv(t, r.newLeader, "OnNewLeader for the second term"); f != second.Fence {
		t.Fatalf("OnNewLeader fence %d, the second term's %d", f, second.Fence)
	}
	r.cancel()
	if err := recv(t, r.done, "Elect's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Elect returned %v", err)
	}
	if info, _ := s.Get(context.Background(), "leader"); info.State != StateReleased || info.Fence != second.Fence {
		t.Fatalf("lease after Elect returned: %+v; want released by the second term", info)
	}
}

// A panic in OnStartedLeading steps down (the lease is released and
// OnStoppedLeading called) before Elect panics again with the value.
func TestElectPanicStepsDown(t *testing.T) {
	s := migratedSQLite(t)
	var stopped bool
	got := func() (v any) {
		defer func() { v = recover() }()
		_ = Elect(context.Background(), s, "leader", ElectionCallbacks{
			OnStartedLeading: func(context.Context, Token) { panic("boom") },
			OnStoppedLeading: func() { stopped = true },
		}, WithTTL(time.Minute))
		return nil
	}()
	if got != "boom" || !stopped {
		t.Fatalf("recovered %v, OnStoppedLeading called %v", got, stopped)
	}
	if info, err := s.Get(context.Background(), "leader"); err != nil || info.State != StateReleased {
		t.Fatalf("lease after the panic: %+v %v; want released", info, err)
	}
}

// A leader whose callback returned still leads until its ctx ends: the
// lease is renewed past its TTL and no one else starts leading.
func TestElectLeadsAfterCallbackReturns(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	s := migratedSQLite(t)
	const ttl = 900 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var tok Token
	returned := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Elect(ctx, s, "leader", ElectionCallbacks{OnStartedLeading: func(_ context.Context, t Token) {
			mu.Lock()
			tok = t
			mu.Unlock()
			close(returned)
		}}, WithTTL(ttl))
	}()
	recv(t, returned, "OnStartedLeading")
	mu.Lock()
	held := tok
	mu.Unlock()
	// Renewed past the TTL: the lease is held, by the same term, after
	// three TTLs measured by the database's own clock.
	first, err := s.Get(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := s.Get(ctx, "leader")
		if err != nil || info.State != StateHeld || info.Fence != held.Fence {
			t.Fatalf("lease while the term should last: %+v %v", info, err)
		}
		if info.DBNow.Sub(first.DBNow) > 3*ttl {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Elect returned %v while its ctx was alive", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := recv(t, done, "Elect's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Elect returned %v", err)
	}
	if info, _ := s.Get(context.Background(), "leader"); info.State != StateReleased {
		t.Fatalf("lease after Elect returned: %+v; want released", info)
	}
}

// A leader partitioned from its database (every byte dropped, nothing
// closed: its renewals hang rather than fail) has its ctx cancelled before
// its lease could lapse; a follower takes over once it lapsed, with a
// higher fence, and a write with the partitioned leader's token is refused.
func TestElectPartitionedLeaderStopsBeforeLapse(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	stalledStores(t, func(t *testing.T, s, direct *Store, p *stallProxy) {
		const ttl = 3 * time.Second
		opts := []RunOption{WithTTL(ttl), WithRetryPeriod(100 * time.Millisecond)}
		table := testdb.WorkTable(t, s.Prefix(), func(ctx context.Context, q string) error { _, err := direct.DB().ExecContext(ctx, q); return err })
		if _, err := direct.DB().ExecContext(context.Background(), "INSERT INTO "+table+" (id, v) VALUES (1, 0)"); err != nil {
			t.Fatal(err)
		}
		type end struct {
			at, lapse time.Time
			cause     error
		}
		ends := make(chan end, 10)
		a := startElect(t, s, func(ctx context.Context, _ Token) {
			<-ctx.Done()
			lapse, _ := LapseTime(ctx)
			ends <- end{time.Now(), lapse, context.Cause(ctx)}
		}, opts...)
		old := recv(t, a.started, "the first leader")
		b := startElect(t, direct, nil, opts...)
		for f := recv(t, b.newLeader, "the follower's OnNewLeader"); f != old.Fence; f = recv(t, b.newLeader, "the follower's OnNewLeader") {
		}

		p.blackHole()
		e := recv(t, ends, "the partitioned leader's ctx ending")
		if !errors.Is(e.cause, ErrUnproven) {
			t.Errorf("partitioned leader's ctx ended with %v, want ErrUnproven", e.cause)
		}
		if !e.at.Before(e.lapse) {
			t.Errorf("partitioned leader's ctx ended %v after its lease could lapse", e.at.Sub(e.lapse))
		}
		next := recv(t, b.started, "the follower's takeover")
		if next.Fence <= old.Fence {
			t.Fatalf("takeover fence %d not above the partitioned leader's %d", next.Fence, old.Fence)
		}
		q := direct.Rebind("UPDATE " + table + " SET v = ? WHERE id = ? AND {{fence}}")
		if _, err := direct.Exec(context.Background(), old, q, 1, 1); !errors.Is(err, ErrLost) {
			t.Errorf("write with the partitioned leader's token: %v, want ErrLost", err)
		}
		if _, err := direct.Exec(context.Background(), next, q, 2, 1); err != nil {
			t.Errorf("write with the new leader's token: %v", err)
		}
		t.Logf("partitioned leader stopped %v before its lease could lapse", e.lapse.Sub(e.at).Round(time.Millisecond))
	})
}
