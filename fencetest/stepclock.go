package fencetest

import (
	"context"
	"sync"
	"time"
)

// stepClock is a fence.Clock whose time moves only when the test says so,
// for Schedule, the one user of the store's clock: a slot comes when the
// test advances to it, however slow the machine, and the test can wait until
// every replica is asleep again before it moves on.
type stepClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters map[*clockWaiter]struct{}
}

type clockWaiter struct {
	until time.Time
	wake  chan struct{}
}

func newStepClock(start time.Time) *stepClock {
	return &stepClock{now: start, waiters: map[*clockWaiter]struct{}{}}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep returns when the clock has been advanced by d, or with ctx's error.
func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	w := &clockWaiter{until: c.now.Add(d), wake: make(chan struct{})}
	if !c.now.Before(w.until) {
		c.mu.Unlock()
		return nil
	}
	c.waiters[w] = struct{}{}
	c.mu.Unlock()
	select {
	case <-w.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.waiters, w)
		c.mu.Unlock()
		return ctx.Err()
	}
}

// advance sets the time to t and wakes every sleeper whose time has come.
func (c *stepClock) advance(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	for w := range c.waiters {
		if !t.Before(w.until) {
			close(w.wake)
			delete(c.waiters, w)
		}
	}
}

// sleeping returns how many goroutines are in Sleep.
func (c *stepClock) sleeping() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}
