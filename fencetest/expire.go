package fencetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

// expiringCtx is a context whose deadline passes when expire is called
// rather than at a time, so a case decides at which step a deadline ends a
// wait instead of betting on how long the steps take.
type expiringCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiringCtx(parent context.Context) *expiringCtx {
	return &expiringCtx{Context: parent, done: make(chan struct{})}
}

func (c *expiringCtx) expire() { c.once.Do(func() { close(c.done) }) }

func (c *expiringCtx) Done() <-chan struct{} { return c.done }

func (c *expiringCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// expireOnHeld is an Observer that expires ctx when an acquire is refused
// with ErrHeld.
type expireOnHeld struct{ ctx *expiringCtx }

func (o expireOnHeld) Observe(ctx context.Context, op fence.Op, _ string) (context.Context, func(fence.Event)) {
	return ctx, func(e fence.Event) {
		if op == fence.OpAcquire && errors.Is(e.Err, fence.ErrHeld) {
			o.ctx.expire()
		}
	}
}

// lapse ends tok's lease as a lapsed TTL would: it renews the lease to the
// shortest TTL and waits until the database says it has expired. Cases use
// a long TTL and lapse rather than a short TTL and a sleep, so that the
// calls that need the lease valid cannot be outlasted by a loaded machine,
// and the expiry comes from the database clock, not from a guess.
func lapse(t testing.TB, s *fence.Store, tok fence.Token) {
	t.Helper()
	if _, err := s.Renew(ctxT(t), tok, fence.MinTTL); err != nil {
		t.Fatalf("renew %v to the minimum TTL: %v", tok, err)
	}
	waitLapsed(t, s, tok.Lease)
}

// waitLapsed waits until the database clock is past name's expiry.
func waitLapsed(t testing.TB, s *fence.Store, name string) {
	t.Helper()
	ctx := ctxT(t)
	for {
		info, err := s.Get(ctx, name)
		if err != nil {
			t.Fatalf("get %q: %v", name, err)
		}
		if info.State != fence.StateHeld {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("lease %q still held: %+v", name, info)
		case <-time.After(info.Remaining + time.Millisecond):
		}
	}
}
