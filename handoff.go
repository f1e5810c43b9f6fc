package fence

import (
	"context"
	"math/rand/v2"
	"time"
)

// releaseWatcher is implemented by drivers that can tell a waiter the
// moment a lease is released or revoked by another process (PostgreSQL,
// with LISTEN/NOTIFY). Elsewhere AcquireWait sleeps until the expiry the
// database reported, capped by the wait backoff.
type releaseWatcher interface {
	// WatchRelease reports every release of name that commits after it
	// returns on wake, until stop is called.
	WatchRelease(ctx context.Context, name string) (wake <-chan struct{}, stop func())
}

// handoff is one AcquireWait's watch of its lease's releases. The zero
// handoff watches nothing and sleeps for the whole time asked.
type handoff struct {
	wake <-chan struct{}
	stop func()
}

// watch starts a handoff when the driver offers one. It is started after
// the first refused attempt, not before it, so that an AcquireWait that gets
// its lease at once costs nothing extra; the caller must then try again
// before it sleeps, since a release that committed before the watch began
// is not reported.
func (s *Store) watch(ctx context.Context, name string) (handoff, bool) {
	w, ok := s.drv.(releaseWatcher)
	if !ok {
		return handoff{}, false
	}
	wake, stop := w.WatchRelease(ctx, name)
	return handoff{wake: wake, stop: stop}, true
}

func (h handoff) close() {
	if h.stop != nil {
		h.stop()
	}
}

// sleep waits for d on clock, or less when a release is announced; its
// error is ctx's when ctx ended first.
func (h handoff) sleep(ctx context.Context, clock Clock, d time.Duration) error {
	if h.wake == nil {
		return clock.Sleep(ctx, d)
	}
	select {
	case <-h.wake:
		return nil
	default:
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-h.wake:
			cancel()
		case <-sctx.Done():
		}
	}()
	err := clock.Sleep(sctx, d)
	if err != nil && ctx.Err() == nil {
		return nil // woken by a release
	}
	return err
}

// waitJitter is the random time added to a wait of d, so that waiters
// released by one expiry do not all retry in the same instant: up to a
// quarter of d, but never more than step (the wait backoff's minimum), so
// that a takeover after the holder's expiry is late by at most step plus a
// round trip, whatever the TTL.
func waitJitter(d, step time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(min(d/4, step)) + 1))
}
