package keep

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

var (
	errRefused  = errors.New("refused")
	errUnproven = errors.New("unproven")
)

func config(renew func(ctx context.Context) error, lost *atomic.Int32) Config {
	return Config{
		TTL: 3 * time.Second, RenewEvery: 100 * time.Millisecond, Deadline: time.Second, CallTimeout: 100 * time.Millisecond,
		Renew:    renew,
		Refused:  func(err error) bool { return errors.Is(err, errRefused) },
		Unproven: func(last error) error { return errors.Join(errUnproven, last) },
		OnLost:   func(error) { lost.Add(1) },
	}
}

func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the keeper's context was not cancelled within 30s")
	}
}

// Renewals that hang (a black-holed connection) end authority at the
// deadline, with the last error, before the TTL.
func TestDeadlineWhenRenewalsHang(t *testing.T) {
	var lost atomic.Int32
	start := time.Now()
	k := Start(context.Background(), config(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}, &lost), start)
	waitDone(t, k.Context())
	took := time.Since(start)
	cause := context.Cause(k.Context())
	if !errors.Is(cause, errUnproven) || !errors.Is(cause, context.DeadlineExceeded) {
		t.Errorf("cause %v, want unproven with the last renewal's timeout", cause)
	}
	if took < time.Second {
		t.Errorf("cancelled after %v, before the 1s deadline", took)
	}
	if k.Held() {
		t.Error("Held after the deadline")
	}
	if err := k.Stop(nil); !errors.Is(err, errUnproven) || lost.Load() != 1 {
		t.Errorf("Stop = %v, OnLost called %d times; want unproven, once", err, lost.Load())
	}
}

// A refusal ends authority at once and is not retried; Stop reports it.
func TestRefusalIsFinal(t *testing.T) {
	var lost, calls atomic.Int32
	k := Start(context.Background(), config(func(context.Context) error {
		calls.Add(1)
		return errRefused
	}, &lost), time.Now())
	waitDone(t, k.Context())
	if err := k.Stop(nil); !errors.Is(err, errRefused) || calls.Load() != 1 || lost.Load() != 1 {
		t.Errorf("Stop = %v after %d renewals, OnLost %d times; want the refusal after one, once", err, calls.Load(), lost.Load())
	}
}

// The parent's end cancels the context but not the renewals: the holder
// may still be winding down. Stop then returns nil: the lease is held.
func TestRenewsUntilStopped(t *testing.T) {
	var lost, calls atomic.Int32
	parent, cancelParent := context.WithCancel(context.Background())
	k := Start(parent, config(func(context.Context) error {
		calls.Add(1)
		return nil
	}, &lost), time.Now())
	cancelParent()
	waitDone(t, k.Context())
	for end := time.Now().Add(30 * time.Second); calls.Load() < 5 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
	}
	if calls.Load() < 5 || !k.Held() {
		t.Fatalf("%d renewals after the parent ended, held %v; want the renewals to go on", calls.Load(), k.Held())
	}
	stopped := errors.New("stopped")
	if err := k.Stop(stopped); err != nil || lost.Load() != 0 {
		t.Fatalf("Stop = %v, OnLost %d; want nil, never", err, lost.Load())
	}
	if k.Held() {
		t.Error("Held after Stop")
	}
	if lapse := k.LapseTime(); time.Until(lapse) > 3*time.Second || time.Until(lapse) < time.Second {
		t.Errorf("lapse time %v ahead; want within the TTL, past the deadline", time.Until(lapse))
	}
}

// Check ends authority once the deadline has passed even if the deadline
// timer has not run (here: started past its deadline, on one P, so the
// timer cannot run before Check), and calls OnLost on a goroutine of its
// own: the holder calls Check on its way into a write and must not run the
// holder's callback there. Stop waits for OnLost.
func TestCheckAtTheDeadline(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	release := make(chan struct{})
	var lost atomic.Int32
	c := config(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, &lost)
	c.OnLost = func(error) { <-release; lost.Add(1) }
	held := Start(context.Background(), c, time.Now())
	if err := held.Check(); err != nil || held.Context().Err() != nil {
		t.Fatalf("Check within the deadline: %v, context %v; want nil", err, held.Context().Err())
	}
	close(release)
	held.Stop(nil)

	release = make(chan struct{})
	k := Start(context.Background(), c, time.Now().Add(-2*time.Second))
	err := k.Check()
	if !errors.Is(err, errUnproven) || !errors.Is(context.Cause(k.Context()), errUnproven) {
		t.Fatalf("Check past the deadline: %v, cause %v; want unproven", err, context.Cause(k.Context()))
	}
	stopped := make(chan error, 1)
	go func() { stopped <- k.Stop(nil) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while OnLost was still running", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-stopped; !errors.Is(err, errUnproven) || lost.Load() != 1 {
		t.Errorf("Stop = %v, OnLost %d times; want unproven, once", err, lost.Load())
	}
}
