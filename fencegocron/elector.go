package fencegocron

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/fencekit/fence"
)

// Elector is a gocron.Elector over one fence lease, built on fence.Elect:
// Run campaigns for the lease and, once it has it, renews it; IsLeader is
// nil only while that holds. Each term of leadership is one acquisition,
// with its own fence, so the leader's writes can be fenced with Token or
// inside a task from Job: a leader that paused or was cut off past its TTL
// cannot commit after the next leader took over.
type Elector struct {
	s    *fence.Store
	name string
	c    config

	running atomic.Bool

	mu   sync.Mutex
	term *term // the current term; nil while not leader
}

// term is one term of leadership as fence.Elect hands it to the leader.
type term struct {
	ctx context.Context // cancelled when the term ends
	tok fence.Token
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
// its own goroutine, once per Elector. It is fence.Elect with the
// Elector's options.
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
	return fence.Elect(ctx, e.s, e.name, fence.ElectionCallbacks{
		OnStartedLeading: func(ctx context.Context, tok fence.Token) {
			e.setTerm(&term{ctx: ctx, tok: tok})
			<-ctx.Done()
			// Not leader any more before anything else, so no new run starts.
			e.setTerm(nil)
		},
	}, e.c.electOptions()...)
}

func (e *Elector) setTerm(t *term) {
	e.mu.Lock()
	e.term = t
	e.mu.Unlock()
}

// current returns the current term if it is still believed held: its ctx
// is not done, and the last renewal is within the renew deadline, which is
// checked here too so the answer does not wait for a timer to run.
func (e *Elector) current() *term {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t == nil || t.ctx.Err() != nil {
		return nil
	}
	if lapse, ok := fence.LapseTime(t.ctx); !ok || time.Until(lapse) <= e.c.ttl-e.c.deadline {
		return nil
	}
	return t
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
	t := e.current()
	if t == nil {
		return fence.Token{}, false
	}
	return t.tok, true
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
		t := e.current()
		if t == nil {
			return fmt.Errorf("%w: lease %q", ErrNotLeader, e.name)
		}
		jctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(t.ctx, func() { cancel(context.Cause(t.ctx)) })
		defer stop()
		return fn(jctx, t.tok)
	}
}
