package fence

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule runs job as a singleton across replicas on a cron spec ("*/5 * * * *",
// "@hourly") or an interval ("@every 30s"), until ctx ends. At each slot every
// replica tries to acquire the lease, after a small random delay so the
// winner is not always the replica whose timer is fastest; the winner runs the
// job as Run does, the others wait for the next slot. After the job, the
// winner keeps the lease until the minimum hold has passed (WithMinHold,
// default half the slot period), so a replica whose timer fires a little late
// finds the slot taken rather than running it again.
//
// Slot times come from the local clock (that is what a schedule is); lease
// validity still comes only from the database. It returns ctx's error.
func Schedule(ctx context.Context, s *Store, name, spec string, job Job, opts ...RunOption) error {
	c, err := s.runConfig(opts)
	if err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return fmt.Errorf("%w: schedule %q: %v", ErrInvalid, clip(spec), err)
	}
	for {
		now := s.clock.Now()
		slot := sched.Next(now)
		period := sched.Next(slot).Sub(slot)
		if period <= 0 {
			return fmt.Errorf("%w: schedule %q has no next slot", ErrInvalid, spec)
		}
		hold := c.minHold
		if hold == 0 {
			hold = period / 2
		}
		jitter := time.Duration(rand.Int64N(int64(min(period/20, 500*time.Millisecond)) + 1))
		if err := s.clock.Sleep(ctx, slot.Sub(now)+jitter); err != nil {
			return err
		}
		start := time.Now() // local monotonic: the renew deadline counts from it
		l, err := s.Acquire(ctx, name, c.ttl)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, ErrHeld) {
				c.log.WarnContext(ctx, "fence: scheduled acquire failed", "lease", name, "err", err)
			}
			c.finished(Result{Outcome: NotAcquired, Err: err, Started: start})
			continue
		}
		s.runHeld(ctx, c, l, start, job, hold)
		if c.retention > 0 {
			pctx, cancel := context.WithTimeout(ctx, c.callTimeout)
			if _, err := s.PruneRuns(pctx, name, c.retention); err != nil && ctx.Err() == nil {
				c.log.WarnContext(ctx, "fence: pruning old runs failed", "lease", name, "err", err)
			}
			cancel()
		}
	}
}
