package fence

import (
	"context"
	"time"
)

// Clock is the local clock. fence uses it only to wait and to give up early
// (the runner's renew deadline); whether a lease is valid is always decided by
// the database clock.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx ends, returning ctx's error then.
	Sleep(ctx context.Context, d time.Duration) error
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SkewedClock is a Clock offset from the system clock by a fixed amount. The
// conformance suite uses it to show that a skewed application clock changes
// no outcome. Durations and monotonic readings are unaffected, as they would
// be on a host whose wall clock is simply wrong.
type SkewedClock struct{ Offset time.Duration }

// Now returns the system time plus the offset.
func (c SkewedClock) Now() time.Time { return time.Now().Add(c.Offset) }

// Sleep is the system clock's sleep.
func (c SkewedClock) Sleep(ctx context.Context, d time.Duration) error {
	return systemClock{}.Sleep(ctx, d)
}
