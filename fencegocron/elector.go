package fencegocron

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/fencekit/fence"
)

// Elector is a gocron.Elector over one fence lease: Run keeps trying to
// acquire the lease and, once it has it, renews it; IsLeader is nil only
// while that holds. Each term of leadership is one acquisition, with its
// own fence, so the leader's writes can be fenced with Token or inside a
// task from Job: a leader that paused or was cut off past its TTL cannot
// commit after the next leader took over.
type Elector struct {
	s    *fence.Store
	name string
	c    config

	running atomic.Bool

	mu   sync.Mutex
	term *keeper // the current term; nil while not leader
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector for the lease name on s; the electors of
// one group of schedulers share the name. The options that apply are
// WithTTL, WithRenewEvery, WithRenewDeadline and WithLogger. Nothing
// happens until Run.
func NewElector(s *fence.Store, name string, opts ...Option) (*Elector, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: fencegocron: store is nil", fence.ErrInvalid)
	}
	if err := fence.ValidateName(name); err != nil {
		return nil, err
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Elector{s: s, name: name, c: c}, nil
}

// Run campaigns for the lease and holds it while it can, until ctx ends;
// then it steps down, releasing the lease (so another instance takes over
// at once rather than after the TTL), and returns ctx's error. Run it in
// its own goroutine, once per Elector.
//
// A follower retries when the holder's lease would lapse by the database
// clock, and at least every renew interval so a release is noticed. A
// leader renews every renew interval; a refused renewal, or none succeeding
// within the renew deadline, ends the term at once (IsLeader fails from
// then on) and Run campaigns again, for a new term with a new fence.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: fencegocron: Elector.Run is already running", fence.ErrInvalid)
	}
	defer e.running.Store(false)
	backoff := e.c.renewEvery / 4
	for {
		start := time.Now()
		l, err := e.s.Acquire(ctx, e.name, e.c.ttl)
		if err == nil {
			backoff = e.c.renewEvery / 4
			if err := e.lead(ctx, l.Token, start); err != nil {
				return err
			}
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var wait time.Duration
		var held *fence.HeldError
		if errors.As(err, &held) {
			wait = min(max(held.Remaining, 10*time.Millisecond), e.c.renewEvery)
		} else {
			e.c.log.Warn("fencegocron: campaign failed", "lease", e.name, "err", err)
			wait = backoff
			backoff = min(backoff*2, e.c.renewEvery)
		}
		// Up to +10% jitter so followers do not all ask at the same instant.
		wait += time.Duration(rand.Int64N(int64(wait)/10 + 1))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// lead holds one term. It returns nil when the term ended by itself (lost
// or unproven), or ctx's error after stepping down.
func (e *Elector) lead(ctx context.Context, tok fence.Token, acquiredAt time.Time) error {
	k := startKeeper(context.Background(), e.s, e.c, tok, acquiredAt)
	e.setTerm(k)
	e.c.log.Info("fencegocron: became leader", "lease", e.name, "fence", tok.Fence)
	select {
	case <-k.ctx.Done():
		// Not leader any more before anything else, so no new run starts.
		e.setTerm(nil)
		lost := k.stop(nil)
		e.c.log.Warn("fencegocron: leadership lost", "lease", e.name, "fence", tok.Fence, "cause", lost)
		if errors.Is(lost, fence.ErrUnproven) {
			// It may still be ours; give it up so a reachable instance
			// need not wait out the TTL.
			e.release(ctx, tok)
		}
		return nil
	case <-ctx.Done():
		e.setTerm(nil)
		lost := k.stop(fmt.Errorf("%w: the elector stopped", ErrNotLeader))
		if lost == nil || errors.Is(lost, fence.ErrUnproven) {
			e.release(ctx, tok)
		}
		e.c.log.Info("fencegocron: stepped down", "lease", e.name, "fence", tok.Fence)
		return ctx.Err()
	}
}

func (e *Elector) release(ctx context.Context, tok fence.Token) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	if err := e.s.Release(ctx, tok); err != nil && !errors.Is(err, fence.ErrLost) {
		e.c.log.Warn("fencegocron: release failed; the lease lapses at its TTL", "lease", e.name, "err", err)
	}
}

func (e *Elector) setTerm(k *keeper) {
	e.mu.Lock()
	e.term = k
	e.mu.Unlock()
}

// current returns the current term if it is still believed held.
func (e *Elector) current() *keeper {
	e.mu.Lock()
	k := e.term
	e.mu.Unlock()
	if k == nil || !k.valid() {
		return nil
	}
	return k
}

// IsLeader implements gocron.Elector: nil while this instance holds the
// lease and renewed it within the renew deadline by the local monotonic
// clock, else an error wrapping ErrNotLeader. It does no I/O, so gocron
// may call it before every run; the deadline is below the TTL, so it stops
// saying yes before the lease can lapse and another instance can lead.
func (e *Elector) IsLeader(context.Context) error {
	if e.current() == nil {
		return fmt.Errorf("%w: lease %q", ErrNotLeader, e.name)
	}
	return nil
}

// Token returns the token of the current term, for leader-only writes that
// must be fenced, and whether this instance is the leader (as IsLeader).
func (e *Elector) Token() (fence.Token, bool) {
	k := e.current()
	if k == nil {
		return fence.Token{}, false
	}
	return k.tok, true
}

// Job returns a task function for gocron.NewTask that runs fn with the
// token of the current term. fn's context is also cancelled, with the
// cause, when that term ends, so a run does not go on into the next
// leader's term unawares. If this instance is not the leader when the
// task starts, it returns an error wrapping ErrNotLeader without calling
// fn (gocron asked IsLeader just before, so that is a term that ended in
// between).
func (e *Elector) Job(fn JobFunc) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		k := e.current()
		if k == nil {
			return fmt.Errorf("%w: lease %q", ErrNotLeader, e.name)
		}
		jctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(k.ctx, func() { cancel(context.Cause(k.ctx)) })
		defer stop()
		return fn(jctx, k.tok)
	}
}
