package fencegocron

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencekit/fence"
)

// keeper renews one acquisition of a lease until stopped. It ends the
// acquisition's authority — cancelling ctx with the cause — the moment a
// renewal is refused (fence.ErrLost) or when none has succeeded within the
// renew deadline (a *fence.UnprovenError), measured on the local monotonic
// clock from the start of the last successful call. It is the same rule as
// fence.Run's, which cannot be reused here: gocron brackets a run with
// Lock and Unlock instead of handing over a function to run.
type keeper struct {
	s   *fence.Store
	c   config
	tok fence.Token

	// ctx is the context the work under this acquisition runs with. It is
	// cancelled when authority ends, when the keeper stops, or with the
	// parent.
	ctx    context.Context
	cancel context.CancelCauseFunc
	halt   context.CancelFunc // stops the renew loop and aborts a call in flight
	exited chan struct{}      // closed when the renew loop has returned

	mu      sync.Mutex
	lastOK  time.Time // local start of the last successful renewal (or acquire)
	lastErr error     // the last renewal error since then
	lost    error     // why authority ended; nil while it holds
	stopped bool
	timer   *time.Timer // fires at lastOK + deadline
}

func startKeeper(parent context.Context, s *fence.Store, c config, tok fence.Token, acquiredAt time.Time) *keeper {
	k := &keeper{s: s, c: c, tok: tok, lastOK: acquiredAt, exited: make(chan struct{})}
	k.ctx, k.cancel = context.WithCancelCause(parent)
	// The loop does not stop with parent: gocron cancels the job context
	// at shutdown while the job may still be running, and the lease must
	// stay renewed until Unlock.
	loop, halt := context.WithCancel(context.Background())
	k.halt = halt
	k.mu.Lock()
	// A timer of its own, not the renew loop, so a renewal call that hangs
	// cannot delay giving up.
	k.timer = time.AfterFunc(c.deadline-time.Since(acquiredAt), k.checkDeadline)
	k.mu.Unlock()
	go k.run(loop)
	return k
}

// valid reports whether the acquisition is still believed held: not lost,
// not stopped, and renewed within the deadline.
func (k *keeper) valid() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost == nil && !k.stopped && time.Since(k.lastOK) < k.c.deadline
}

func (k *keeper) lostErr() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// stop ends the renew loop, waits for it, then cancels ctx with cause. It
// returns why authority was lost, or nil if the lease is still held as far
// as the keeper knows (then the caller releases or keeps it).
func (k *keeper) stop(cause error) error {
	k.halt()
	<-k.exited
	k.mu.Lock()
	if k.lost == nil && time.Since(k.lastOK) >= k.c.deadline {
		// The timer is due but has not run yet: the lease is unproven all
		// the same.
		k.lost = k.unprovenLocked()
	}
	k.stopped = true
	k.timer.Stop()
	lost := k.lost
	k.mu.Unlock()
	k.cancel(cause)
	return lost
}

func (k *keeper) unprovenLocked() error {
	return &fence.UnprovenError{Token: k.tok, Deadline: k.c.deadline, Last: k.lastErr}
}

// lose ends authority once, with cause.
func (k *keeper) lose(cause error) {
	k.mu.Lock()
	first := k.lost == nil && !k.stopped
	if first {
		k.lost = cause
		k.timer.Stop()
	}
	k.mu.Unlock()
	if first {
		k.c.log.Warn("fencegocron: lease lost", "lease", k.tok.Lease, "fence", k.tok.Fence, "cause", cause)
		k.cancel(cause)
	}
}

func (k *keeper) checkDeadline() {
	k.mu.Lock()
	if k.lost != nil || k.stopped {
		k.mu.Unlock()
		return
	}
	if left := k.c.deadline - time.Since(k.lastOK); left > 0 {
		k.timer.Reset(left) // a renewal moved lastOK since the timer was set
		k.mu.Unlock()
		return
	}
	cause := k.unprovenLocked()
	k.mu.Unlock()
	k.lose(cause)
}

func (k *keeper) renewed(start time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lost != nil || k.stopped {
		return
	}
	if start.After(k.lastOK) {
		k.lastOK = start
	}
	k.lastErr = nil
	k.timer.Reset(k.c.deadline - time.Since(k.lastOK))
}

func (k *keeper) run(ctx context.Context) {
	defer close(k.exited)
	next := k.c.renewEvery
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		if k.lostErr() != nil {
			return // the deadline timer gave up while the loop slept
		}
		start := time.Now()
		k.mu.Lock()
		left := k.c.deadline - start.Sub(k.lastOK)
		k.mu.Unlock()
		if left <= 0 {
			k.checkDeadline()
			return
		}
		// Bounded by the deadline too: a call still in flight then proves
		// nothing.
		cctx, cancel := context.WithTimeout(ctx, min(k.c.renewEvery, left))
		_, err := k.s.Renew(cctx, k.tok, k.c.ttl)
		cancel()
		switch {
		case err == nil:
			k.renewed(start)
			next = k.c.renewEvery
		case errors.Is(err, fence.ErrLost):
			// The database said no: final, never retried.
			k.lose(err)
			return
		case ctx.Err() != nil:
			return // stopped while the call was in flight
		default:
			// Transient: retry soon while the deadline allows; the timer
			// ends authority if nothing succeeds in time.
			k.mu.Lock()
			k.lastErr = err
			k.mu.Unlock()
			k.c.log.Warn("fencegocron: renewal failed, retrying", "lease", k.tok.Lease, "fence", k.tok.Fence, "err", err)
			next = max(k.c.renewEvery/4, 10*time.Millisecond)
		}
	}
}
