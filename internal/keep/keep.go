// Package keep is the renewal loop every holder of a fence lease runs: the
// runner (fence.Run, fence.Schedule), leader election (fence.Elect) and
// fencegocron's Locker. It renews a held lease at an interval and ends the
// holder's authority — cancelling a context with the cause — the moment a
// renewal is refused, or when none has succeeded within the renew deadline,
// measured on boot time (internal/boottime) from the start of the last
// successful call. The deadline is below the TTL, so the holder is told to
// stop before the lease can lapse and be taken.
//
// It knows nothing of tokens or stores: the caller passes the renewal as a
// function and says which errors are refusals, so the root package and its
// integrations share one loop without an import cycle.
package keep

import (
	"context"
	"sync"
	"time"

	"github.com/fencekit/fence/internal/boottime"
)

// Config is one lease's renewal schedule and what to do at each step.
type Config struct {
	// TTL is the lease's TTL: the lease can lapse TTL after the start of
	// the last successful renewal.
	TTL time.Duration
	// RenewEvery is the interval between successful renewals.
	RenewEvery time.Duration
	// Deadline is how long after the start of the last successful renewal
	// the holder keeps its authority without another one; below TTL.
	Deadline time.Duration
	// CallTimeout bounds each renewal call (never past the deadline).
	CallTimeout time.Duration

	// Renew renews the lease for TTL.
	Renew func(ctx context.Context) error
	// Refused reports whether a renewal error is final (the database said
	// no); any other error is retried while the deadline allows.
	Refused func(err error) bool
	// Unproven is the cause for the deadline, given the last renewal error
	// (nil if none failed).
	Unproven func(last error) error
	// OnLost, if set, is called once, after the context was cancelled
	// with the cause, when authority ends before Stop.
	OnLost func(cause error)
	// OnRetry, if set, is told of each transient renewal failure.
	OnRetry func(err error)
}

// Keeper renews one acquisition of a lease until stopped.
type Keeper struct {
	c Config

	ctx      context.Context
	cancel   context.CancelCauseFunc
	quit     chan struct{} // closed by Stop: no renewal starts after it
	quitOnce sync.Once
	exited   chan struct{} // closed when the renew loop has returned

	mu      sync.Mutex
	lastOK  time.Duration // boot time at the start of the last successful renewal (or acquire)
	lastErr error         // the last renewal error since then
	lost    error         // why authority ended; nil while it holds
	stopped bool
	timer   *time.Timer
	// notified is closed once OnLost has returned; nil until authority
	// ends.
	notified chan struct{}
}

// Start starts renewing a lease acquired at acquiredAt, the local time
// (time.Now, not a skewed clock) from just before the acquire call: the
// latest moment the lease can have started. Context() derives from parent,
// but the renewals do not stop with parent: the holder may still be
// winding down when parent ends, and the lease must stay renewed until
// Stop.
func Start(parent context.Context, c Config, acquiredAt time.Time) *Keeper {
	// Boot time, which a suspend does not stop; acquiredAt only says how
	// long ago the acquire began.
	k := &Keeper{c: c, lastOK: boottime.Now() - max(time.Since(acquiredAt), 0), quit: make(chan struct{}), exited: make(chan struct{})}
	k.ctx, k.cancel = context.WithCancelCause(parent)
	k.armDeadline()
	go k.run(context.WithoutCancel(parent))
	return k
}

// Context is cancelled, with the cause, when authority ends, when the
// keeper stops, or with the parent.
func (k *Keeper) Context() context.Context { return k.ctx }

// Lost returns why authority ended, or nil while it holds (or when the
// keeper was stopped while it held).
func (k *Keeper) Lost() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// Held reports whether the lease is still believed held: not lost, not
// stopped, and renewed within the deadline. It does not wait for the
// deadline timer, so it says no from the deadline on even on a machine too
// loaded to run the timer in time.
func (k *Keeper) Held() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost == nil && !k.stopped && boottime.Now()-k.lastOK < k.c.Deadline
}

// LapseTime returns the local time at which the lease could first lapse:
// the start of the last successful renewal (or of the acquire) plus the
// TTL, counted on boot time and returned relative to now.
func (k *Keeper) LapseTime() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return time.Now().Add(k.lastOK + k.c.TTL - boottime.Now())
}

// Check ends authority at once if the renew deadline has passed, as the
// deadline timer does when it runs, and returns why authority ended (nil
// while it holds; then Context is not done by the keeper). Call it just
// before acting under the lease: after a pause (a stopped process, a
// suspended host, a starved scheduler) the holder's goroutine can run
// before the timer's, and would otherwise act on a context that is about
// to be cancelled. OnLost is then called on a goroutine of its own, never
// on the caller's, and Stop waits for it.
func (k *Keeper) Check() error {
	k.mu.Lock()
	late := k.lost == nil && !k.stopped && boottime.Now()-k.lastOK >= k.c.Deadline
	last := k.lastErr
	k.mu.Unlock()
	if late {
		k.lose(k.c.Unproven(last), true)
	}
	return k.Lost()
}

// Stop ends the renewals, waits for the loop to return (a renewal in
// flight is let finish, within its call timeout: aborting it would cost
// some drivers the connection the caller's next statement needs) and for
// OnLost to return, then cancels Context with cause. It returns why
// authority was lost — including a deadline that passed before the timer
// could say so — or nil if the lease is still held as far as the keeper
// knows; then the caller releases or keeps it. Only the first call stops;
// later ones return the same.
func (k *Keeper) Stop(cause error) error {
	k.quitOnce.Do(func() { close(k.quit) })
	<-k.exited
	k.mu.Lock()
	if k.lost == nil && !k.stopped && boottime.Now()-k.lastOK >= k.c.Deadline {
		k.lost = k.c.Unproven(k.lastErr)
	}
	k.stopped = true
	k.timer.Stop()
	lost, notified := k.lost, k.notified
	k.mu.Unlock()
	if notified != nil {
		<-notified
	}
	k.cancel(cause)
	return lost
}

// lose ends authority once, with cause, and calls OnLost: on a goroutine
// of its own when async (Check, on the holder's goroutine), else on the
// caller's (the timer's or the renew loop's).
func (k *Keeper) lose(cause error, async bool) {
	k.mu.Lock()
	first := k.lost == nil && !k.stopped
	notified := make(chan struct{})
	if first {
		k.lost = cause
		k.timer.Stop()
		k.notified = notified
	}
	k.mu.Unlock()
	if !first {
		return
	}
	k.cancel(cause)
	notify := func() {
		defer close(notified)
		if k.c.OnLost != nil {
			k.c.OnLost(cause)
		}
	}
	if async {
		go notify()
	} else {
		notify()
	}
}

// deadlineCheck bounds how long the deadline timer sleeps. Go's timers run
// on CLOCK_MONOTONIC, which stands still while the host is suspended: after
// a resume the timer would fire late by the length of the suspend, so it
// wakes at least this often to read boot time.
const deadlineCheck = 250 * time.Millisecond

// armDeadline (re)starts the timer that ends authority at lastOK+Deadline.
// It runs on its own timer, not in the renew loop, so a renewal call that
// hangs cannot delay the cancellation.
func (k *Keeper) armDeadline() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lost != nil || k.stopped {
		return
	}
	left := k.c.Deadline - (boottime.Now() - k.lastOK)
	if k.timer != nil {
		k.timer.Stop()
	}
	k.timer = time.AfterFunc(min(left, deadlineCheck), k.checkDeadline)
}

func (k *Keeper) checkDeadline() {
	k.mu.Lock()
	late := boottime.Now()-k.lastOK >= k.c.Deadline
	last := k.lastErr
	k.mu.Unlock()
	if late {
		k.lose(k.c.Unproven(last), false)
		return
	}
	k.armDeadline()
}

func (k *Keeper) run(ctx context.Context) {
	defer close(k.exited)
	// The first renewal is due RenewEvery after the acquisition, not after
	// the caller's bookkeeping: its round trips are part of the interval.
	k.mu.Lock()
	next := max(k.c.RenewEvery-(boottime.Now()-k.lastOK), 0)
	k.mu.Unlock()
	for {
		t := time.NewTimer(next)
		select {
		case <-k.quit:
			t.Stop()
			return
		case <-t.C:
		}
		if k.Lost() != nil {
			return // the deadline timer gave up while the loop slept
		}
		start := boottime.Now()
		k.mu.Lock()
		left := k.c.Deadline - (start - k.lastOK)
		k.mu.Unlock()
		// Bounded by the deadline too: a call still in flight then proves
		// nothing.
		cctx, cancel := context.WithTimeout(ctx, min(k.c.CallTimeout, max(left, time.Millisecond)))
		err := k.c.Renew(cctx)
		cancel()
		switch {
		case err == nil:
			k.mu.Lock()
			if k.lost == nil && start > k.lastOK {
				k.lastOK, k.lastErr = start, nil
			}
			k.mu.Unlock()
			k.armDeadline()
			next = k.c.RenewEvery
		case k.c.Refused(err):
			// The database said no: final, never retried.
			k.lose(err, false)
			return
		default:
			// Transient (timeout, dropped connection): retry soon, while
			// the deadline still allows; the deadline timer ends authority
			// if nothing succeeds in time.
			k.mu.Lock()
			k.lastErr = err
			k.mu.Unlock()
			if k.c.OnRetry != nil {
				k.c.OnRetry(err)
			}
			next = max(k.c.RenewEvery/4, 10*time.Millisecond)
		}
	}
}

type ctxKey struct{}

// NewContext returns ctx carrying k, for FromContext: the holder's
// context, so that a call made under the lease can Check it first.
func NewContext(ctx context.Context, k *Keeper) context.Context {
	return context.WithValue(ctx, ctxKey{}, k)
}

// FromContext returns the keeper NewContext put in ctx.
func FromContext(ctx context.Context) (*Keeper, bool) {
	k, ok := ctx.Value(ctxKey{}).(*Keeper)
	return k, ok
}
