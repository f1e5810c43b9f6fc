package fencetest

import (
	"context"
	"errors"
	"sync"

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
