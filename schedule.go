package fence

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule runs job as a singleton across replicas on a cron spec or an
// interval, until ctx ends. At each slot every replica tries to acquire the
// lease, after a small random delay so the winner is not always the replica
// whose timer is fastest; the winner runs the job as Run does, the others
// wait for the next slot. After the job, the winner keeps the lease until
// the minimum hold has passed (WithMinHold, default half the slot period),
// so a replica whose timer fires a little late finds the slot taken rather
// than running it again.
//
// # Specs
//
// A spec is a cron line of 5 fields (minute hour day-of-month month
// day-of-week: "*/5 * * * *"), or of 6 fields with seconds first
// ("30 */5 * * * *": 30 s past every fifth minute), or a descriptor:
// "@hourly", "@daily", "@weekly", "@monthly", "@yearly", or "@every 30s"
// (an interval, counted from the local clock's now, not aligned to the
// wall clock). The fields take what cron takes: lists (1,15), ranges
// (1-5), steps (*/10) and names (MON-FRI, JAN).
//
// # Time zone
//
// A cron line's times are in the local time zone of the process unless
// the spec starts with CRON_TZ=<IANA zone> ("CRON_TZ=Europe/Berlin 0 6 * * *")
// or WithTimeZone is given (the spec's CRON_TZ wins). Give every replica
// the same zone: replicas in different zones run the "same" spec at
// different instants. Across a daylight-saving change, a slot at a time
// that does not exist that day is skipped, and one at a time that happens
// twice runs twice, once per instant (robfig/cron's rule, which Schedule
// uses; TestScheduleSpecs checks both). Schedule in UTC to have neither.
//
// # Failed and missed slots
//
// By default a slot whose job failed is not run again, and a slot at which
// no replica ran (all were down, or the database was unreachable) is gone.
//
//   - WithRetry(n, backoff): when the job returns an error (Outcome
//     Failed; not when authority was lost), run it again up to n times,
//     backoff apart, while the next slot is more than backoff away. Each
//     attempt is a run of its own in the ledger. The replica whose attempt
//     failed releases the lease, waits, and acquires it again; under the
//     lease it reads the ledger and runs only if no attempt of the slot has
//     succeeded (or is running) meanwhile. If that replica stops, the
//     retries stop with it.
//   - WithCatchUp(within): when Schedule starts and after every slot, a
//     replica looks for the latest slot less than within ago that has no
//     run in the ledger, and runs it once, late. The decision is made from
//     the ledger while holding the lease, and the run is recorded before
//     the lease is let go, so among any number of replicas exactly one runs
//     a missed slot. A run counts for a slot when it started at most half a
//     period before the slot, on the database clock (the slot's time is
//     carried over from the local clock by the difference between the two).
//     Only the latest missed slot runs: a replica down for a day catches up
//     once, not once per missed slot. An "@every" spec has no slots to
//     miss (they count from each replica's start): WithCatchUp does
//     nothing there. With WithCatchUp every replica reads the ledger after
//     each slot (two short queries).
//
// # Callbacks
//
// OnStarted, OnLost and OnFinished are called only on the replica that ran
// the slot (or attempt), as ShedLock's users expect: a replica that found
// the slot taken calls none of them.
//
// Slot times come from the local clock (Store's Clock; that is what a
// schedule is); lease validity still comes only from the database. It
// returns ctx's error, or ErrInvalid for a bad spec or option.
func Schedule(ctx context.Context, s *Store, name, spec string, job Job, opts ...RunOption) error {
	c, err := s.runConfig(opts)
	if err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	sched, err := parseSpec(spec, c.loc)
	if err != nil {
		return err
	}
	sc := &scheduler{s: s, c: c, name: name, job: job, sched: sched}
	now := s.clock.Now()
	if sc.period(now) <= 0 {
		return fmt.Errorf("%w: schedule %q has no next slot", ErrInvalid, clip(spec))
	}
	if err := sc.catchUp(ctx, now); err != nil {
		return err
	}
	for {
		now := s.clock.Now()
		slot := sched.Next(now)
		period := sc.period(now)
		if period <= 0 {
			return fmt.Errorf("%w: schedule %q has no next slot", ErrInvalid, clip(spec))
		}
		jitter := time.Duration(rand.Int64N(int64(min(period/20, 500*time.Millisecond)) + 1))
		if err := s.clock.Sleep(ctx, slot.Sub(now)+jitter); err != nil {
			return err
		}
		if err := sc.runSlot(ctx, slot, onTime); err != nil {
			return err
		}
		if err := sc.catchUp(ctx, s.clock.Now()); err != nil {
			return err
		}
	}
}

// cronParser takes 5 fields, or 6 with seconds first, and descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseSpec parses spec; a cron line without its own CRON_TZ= (or TZ=)
// gets loc when it is not nil.
func parseSpec(spec string, loc *time.Location) (cron.Schedule, error) {
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %v (want 5 cron fields, 6 with seconds first, or @hourly, @every 30s, …; CRON_TZ=Zone/Name first for a time zone)", ErrInvalid, clip(spec), err)
	}
	if ss, ok := sched.(*cron.SpecSchedule); ok && loc != nil && !hasTZ(spec) {
		ss.Location = loc
	}
	return sched, nil
}

func hasTZ(spec string) bool {
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if len(spec) >= len(p) && spec[:len(p)] == p {
			return true
		}
	}
	return false
}

// WithTimeZone sets the time zone of a Schedule's cron line (default: the
// process's local zone; a CRON_TZ= in the spec wins). Schedule only.
func WithTimeZone(loc *time.Location) RunOption { return func(c *runConfig) { c.loc = loc } }

// WithRetry makes Schedule run a slot's job again, up to n times, backoff
// apart, when it returns an error, while the next slot is more than
// backoff away (see Schedule). Schedule only.
func WithRetry(n int, backoff time.Duration) RunOption {
	return func(c *runConfig) { c.retries, c.retryBackoff = n, backoff }
}

// WithCatchUp makes Schedule run, once, the latest slot less than within
// ago at which no replica ran the job, decided from the run ledger so that
// exactly one replica runs it (see Schedule). Schedule only.
func WithCatchUp(within time.Duration) RunOption { return func(c *runConfig) { c.catchUp = within } }

type scheduler struct {
	s     *Store
	c     runConfig
	name  string
	job   Job
	sched cron.Schedule
}

// period is the length of the slot after the one that follows t.
func (sc *scheduler) period(t time.Time) time.Duration {
	next := sc.sched.Next(t)
	return sc.sched.Next(next).Sub(next)
}

// What attempt checks in the ledger, under the lease, before it runs.
type slotCheck int

const (
	onTime slotCheck = iota // the slot's own timer: no check
	missed                  // a catch-up: run only if the slot has no run at all
	undone                  // a retry: run only if no run of the slot succeeded or is running
)

// runSlot tries to run slot (a local time) and then its retries. It
// returns an error only when ctx ended.
func (sc *scheduler) runSlot(ctx context.Context, slot time.Time, first slotCheck) error {
	period := sc.period(slot.Add(-time.Nanosecond))
	next := sc.sched.Next(slot)
	check := first
	for attempt := 0; ; attempt++ {
		res, ran, err := sc.attempt(ctx, slot, period, check)
		if err != nil || !ran || res.Outcome != Failed || attempt >= sc.c.retries {
			return err
		}
		// A failed attempt: again after the backoff, if the slot lasts.
		// The minimum hold kept the lease; give it up, so that the retry
		// is decided under the lease like any other run of the slot.
		if !sc.s.clock.Now().Add(sc.c.retryBackoff).Before(next) {
			return nil
		}
		sc.s.releaseQuietly(context.WithoutCancel(ctx), res.Token, sc.c.log)
		sc.c.log.InfoContext(ctx, "fence: scheduled job failed; retrying", "lease", sc.name, "slot", slot, "retry", attempt+1, "of", sc.c.retries, "in", sc.c.retryBackoff)
		if err := sc.s.clock.Sleep(ctx, sc.c.retryBackoff); err != nil {
			return err
		}
		check = undone
	}
}

// attempt acquires the lease and, if check finds the slot still needs a
// run, runs the job once for it.
func (sc *scheduler) attempt(ctx context.Context, slot time.Time, period time.Duration, check slotCheck) (Result, bool, error) {
	start := time.Now() // local monotonic: the renew deadline counts from it
	l, err := sc.s.Acquire(ctx, sc.name, sc.c.ttl)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, false, ctx.Err()
		}
		if !errors.Is(err, ErrHeld) {
			sc.c.log.WarnContext(ctx, "fence: scheduled acquire failed", "lease", sc.name, "err", err)
		}
		return Result{}, false, nil
	}
	if !l.began.IsZero() {
		start = l.began
	}
	if check != onTime {
		need, err := sc.needsRun(ctx, slot, period, check)
		if err != nil || !need {
			if err != nil && ctx.Err() == nil {
				sc.c.log.WarnContext(ctx, "fence: reading the run ledger for a slot failed", "lease", sc.name, "err", err)
			}
			sc.s.releaseQuietly(context.WithoutCancel(ctx), l.Token, sc.c.log)
			return Result{}, false, ctx.Err()
		}
	}
	hold := sc.c.minHold
	if hold == 0 {
		hold = period / 2
	}
	r := sc.s.runHeld(ctx, sc.c, l, start, sc.job, hold)
	if sc.c.retention > 0 {
		pctx, cancel := context.WithTimeout(ctx, sc.c.callTimeout)
		if _, err := sc.s.PruneRuns(pctx, sc.name, sc.c.retention); err != nil && ctx.Err() == nil {
			sc.c.log.WarnContext(ctx, "fence: pruning old runs failed", "lease", sc.name, "err", err)
		}
		cancel()
	}
	return r, true, nil
}

// needsRun reads the ledger for slot: a run is the slot's when it started
// (database time) at most half a period before the slot's time carried
// over to the database clock. missed: does the slot have no run? undone:
// has none of its runs succeeded, and none is running?
func (sc *scheduler) needsRun(ctx context.Context, slot time.Time, period time.Duration, check slotCheck) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, sc.c.callTimeout)
	defer cancel()
	local := sc.s.clock.Now()
	db, err := sc.s.Now(cctx)
	if err != nil {
		return false, err
	}
	from := slot.Add(db.Sub(local)).Add(-period / 2)
	runs, err := sc.s.Runs(cctx, RunFilter{Lease: sc.name, Limit: sc.c.retries + 8})
	if err != nil {
		return false, err
	}
	for _, r := range runs {
		if r.StartedAt.Before(from) {
			break // newest first: the rest are older
		}
		if check == missed || r.Status == RunSucceeded || r.Status == RunRunning {
			return false, nil
		}
	}
	return true, nil
}

// catchUp runs the latest slot less than the catch-up window before now,
// if no run in the ledger covers it (see Schedule): first read without the
// lease, so that replicas do not contend for it at every slot, then
// decided again under it.
func (sc *scheduler) catchUp(ctx context.Context, now time.Time) error {
	if sc.c.catchUp <= 0 {
		return nil
	}
	slot, ok := sc.lastSlot(now)
	if !ok || now.Sub(slot) >= sc.c.catchUp {
		return nil
	}
	need, err := sc.needsRun(ctx, slot, sc.period(slot.Add(-time.Nanosecond)), missed)
	if err != nil || !need {
		if err != nil && ctx.Err() == nil {
			sc.c.log.WarnContext(ctx, "fence: reading the run ledger for catch-up failed", "lease", sc.name, "err", err)
		}
		return ctx.Err()
	}
	sc.c.log.InfoContext(ctx, "fence: catching up a missed slot", "lease", sc.name, "slot", slot)
	return sc.runSlot(ctx, slot, missed)
}

// lastSlot is the latest slot at or before now within the catch-up window:
// the schedule only goes forward, so it is found by stepping from the
// window's start.
func (sc *scheduler) lastSlot(now time.Time) (time.Time, bool) {
	if _, ok := sc.sched.(cron.ConstantDelaySchedule); ok {
		// "@every": its slots count from whenever a replica started, so
		// no slot can be said to have been missed.
		return time.Time{}, false
	}
	var last time.Time
	t := sc.sched.Next(now.Add(-sc.c.catchUp))
	for i := 0; i < 1_000_000 && !t.IsZero() && !t.After(now); i++ {
		last, t = t, sc.sched.Next(t)
	}
	return last, !last.IsZero()
}
