package fence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/fencekit/fence/internal/keep"
)

// ElectionCallbacks are what Elect calls as leadership comes and goes. Elect
// calls them one at a time, from the goroutine that called Elect, never two
// at once; in each term of leadership the order is
//
//	OnNewLeader(own identity, fence) → OnStartedLeading(ctx, token) returns
//	→ ctx is done → OnStoppedLeading()
//
// and while following, OnNewLeader for each new leader observed.
type ElectionCallbacks struct {
	// OnStartedLeading is called when this instance becomes the leader, with
	// the term's token, for writes that must be fenced (Store.Exec, InTx,
	// CheckTx): each term has a new, higher fence, so a leader that paused
	// or was cut off past its TTL cannot commit after the next one took
	// over. ctx is cancelled, with a cause wrapping ErrLost, the moment a
	// renewal is refused or none succeeded within the renew deadline —
	// before the lease can lapse — and with Elect's context; TokenFrom and
	// LapseTime work on it.
	//
	// The lease stays held, and renewed, until OnStartedLeading returns, so
	// return soon after ctx is done: Elect waits for it before it releases
	// the lease or campaigns again. Returning earlier does not end the term:
	// this instance leads, doing nothing, until ctx is done. Required.
	OnStartedLeading func(ctx context.Context, tok Token)
	// OnStoppedLeading is called when a term ended, after its ctx is done
	// and OnStartedLeading returned, and after the lease was released if it
	// could be. Optional.
	OnStoppedLeading func()
	// OnNewLeader is called when the observed leader changes (a new fence),
	// this instance included, with the leader's identity and its term's
	// fence. A follower observes at the retry period, so a short term can
	// go unreported. Optional.
	OnNewLeader func(identity string, fence int64)
}

// WithRetryPeriod sets how often a follower reads the lease to see who
// leads and whether it can campaign (default: the renew interval); it also
// tries when the leader's lease would lapse by the database clock. Elect
// only.
func WithRetryPeriod(d time.Duration) RunOption { return func(c *runConfig) { c.retry = d } }

// Elect campaigns for leadership of the lease name on s until ctx ends:
// leader election in the manner of client-go's leaderelection, with
// fencing. Every instance calls Elect with the same name; at most one leads
// at any instant of the database clock.
//
// A follower reads the lease every retry period (and when the leader's
// lease would lapse) and acquires it when it is free. The leader renews it
// every renew interval (WithRenewEvery, default TTL/3); a refused renewal,
// or none succeeding within the renew deadline (WithRenewDeadline, default
// 2/3 TTL, measured on the boot clock from the start of the last successful
// renewal), ends the term at once — the leader's ctx is cancelled before
// the lease can lapse — and Elect campaigns again, for a new term with a
// new fence. When ctx ends, the leader's ctx is cancelled, and once
// OnStartedLeading returned the lease is released, so another instance
// takes over at once rather than after the TTL.
//
// The options that apply are WithTTL, WithRenewEvery, WithRenewDeadline,
// WithCallTimeout (which bounds every call: renewal, read, campaign),
// WithRetryPeriod, OnLost and WithRunLogger. Elect returns
// ctx's error when ctx ends, or an error for bad arguments. If
// OnStartedLeading panics, Elect steps down (releases the lease), calls
// OnStoppedLeading and panics again with the same value.
//
// Each term is recorded in the run ledger as a run of the lease
// (RunInfo.IsTerm): its holder name, its fence, its start and its end by
// the database clock, and how it ended (succeeded when the leader stepped
// down, lost when the lease was lost; abandoned when a newer term began
// before this leader noticed, and then its end is when it noticed). The
// operations page (fence serve) shows terms on its timeline. WithRetention
// does not apply; prune terms with Store.PruneRuns.
//
// Leadership is not a fence: the leader's ctx is cancelled before the
// lease can lapse, but only writes made with the term's token are refused
// once a newer term began; other side effects of a leader that paused past
// its TTL can overlap the next leader's.
func Elect(ctx context.Context, s *Store, name string, cb ElectionCallbacks, opts ...RunOption) error {
	if s == nil {
		return fmt.Errorf("%w: Elect: store is nil", ErrInvalid)
	}
	c, err := s.runConfig(opts)
	if err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	if cb.OnStartedLeading == nil {
		return fmt.Errorf("%w: Elect: OnStartedLeading is required", ErrInvalid)
	}
	e := &election{s: s, name: name, c: c, cb: cb, log: c.log.With("lease", name)}
	return e.run(ctx)
}

type election struct {
	s    *Store
	name string
	c    runConfig
	cb   ElectionCallbacks
	log  *slog.Logger

	reported int64 // the fence last given to OnNewLeader; 0 before the first
}

// leaderIdentity is how Elect names a leader to OnNewLeader: its holder name
// (WithHolder, by default host:pid). The owner token is a secret — whoever
// knows it can renew, release and write as the holder — so a row written
// before fence recorded names is shown by the first 8 hex digits of its
// owner only.
func leaderIdentity(l LeaseInfo) string {
	if l.Holder != "" {
		return l.Holder
	}
	return shortOwner(l.Owner)
}

// observe reports a leader to OnNewLeader if its term is not the last one
// reported.
func (e *election) observe(l LeaseInfo) {
	if l.Fence == e.reported {
		return
	}
	e.reported = l.Fence
	if e.cb.OnNewLeader != nil {
		e.cb.OnNewLeader(leaderIdentity(l), l.Fence)
	}
}

func (e *election) run(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		wait := e.c.retry
		// Each call bounded like a renewal: a follower stuck on a dead
		// connection would not campaign when the network heals.
		cctx, cancel := context.WithTimeout(ctx, e.c.callTimeout)
		info, err := e.s.Get(cctx, e.name)
		cancel()
		switch {
		case err == nil && info.State == StateHeld:
			e.observe(info)
			// Try again when it would lapse, if that is sooner.
			wait = min(max(info.Remaining, 10*time.Millisecond), wait)
		case err == nil || errors.Is(err, ErrNotFound):
			start := time.Now()
			cctx, cancel := context.WithTimeout(ctx, e.c.callTimeout)
			l, err := e.s.Acquire(cctx, e.name, e.c.ttl)
			cancel()
			if err == nil {
				if !l.began.IsZero() {
					start = l.began
				}
				if err := e.lead(ctx, l, start); err != nil {
					return err
				}
				continue
			}
			var held *HeldError
			if errors.As(err, &held) {
				// Taken between the read and the acquire: the next read
				// reports the new leader.
				wait = min(max(held.Remaining, 10*time.Millisecond), wait)
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.log.WarnContext(ctx, "fence: campaign failed; retrying", "err", err)
		default:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.log.WarnContext(ctx, "fence: reading the leader failed; retrying", "err", err)
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

// errSteppedDown is the cause given to the leader's context when its term
// ended without a loss, after the callback returned.
var errSteppedDown = errors.New("fence: leader stepped down")

// lead holds one term of the lease l acquired at the local time acquiredAt.
// It returns nil when the term ended by itself (lost or unproven), or ctx's
// error after stepping down.
func (e *election) lead(ctx context.Context, l Lease, acquiredAt time.Time) (err error) {
	t := l.Token
	log := e.log.With("fence", t.Fence)
	k := e.s.startKeeper(ctx, e.c, t, acquiredAt, log)
	log.InfoContext(ctx, "fence: became leader")
	bg := context.WithoutCancel(ctx)
	// The term goes in the run ledger like a run: who led (the holder
	// name), from when to when by the database clock, with which fence,
	// and how it ended. A term the ledger could not record is still led:
	// the ledger is for operators, the lease decides who leads.
	cctx, cancel := context.WithTimeout(ctx, e.c.callTimeout)
	id, err := e.s.StartRun(cctx, t, termDetail)
	cancel()
	if err != nil {
		id = 0
		log.WarnContext(ctx, "fence: recording the term in the run ledger failed", "err", err)
	}
	// The instance's own term, as a read of the lease would show it.
	e.observe(LeaseInfo{Name: t.Lease, State: StateHeld, Owner: t.Owner, Holder: e.s.Holder(), Fence: t.Fence})

	lctx := context.WithValue(k.Context(), tokenKey, t)
	lctx = keep.NewContext(lctx, k)
	p := callLeader(lctx, t, e.cb.OnStartedLeading)
	if p == nil {
		// A callback that returned early keeps the term until it ends.
		<-k.Context().Done()
	}
	lost := k.Stop(errSteppedDown)
	if id != 0 {
		e.endTerm(bg, t, id, lost, p, log)
	}
	switch {
	case lost == nil:
		log.InfoContext(ctx, "fence: stepping down")
		e.s.releaseQuietly(context.WithoutCancel(ctx), t, log)
	case errors.Is(lost, ErrUnproven):
		// It may still be ours; give it up so a reachable instance need not
		// wait out the TTL.
		log.WarnContext(ctx, "fence: leadership lost", "cause", lost)
		e.s.releaseQuietly(context.WithoutCancel(ctx), t, log)
	default:
		log.WarnContext(ctx, "fence: leadership lost", "cause", lost)
	}
	if e.cb.OnStoppedLeading != nil {
		e.cb.OnStoppedLeading()
	}
	if p != nil {
		panic(p.value)
	}
	return ctx.Err()
}

// termDetail is the detail, and the result, of a term's run.
var termDetail = json.RawMessage(`{"fence_term":"leader"}`)

// IsTerm reports whether the run is a term of leadership that Elect
// recorded: its start and end are the term's, its holder the leader.
// Its status says how the term ended: succeeded (stepped down), failed
// (OnStartedLeading panicked), lost (the lease was lost or could not be
// proven), abandoned (a newer term began before this leader noticed; its
// end is when it noticed, if it could say so).
func (r RunInfo) IsTerm() bool { return bytes.Equal(r.Result, termDetail) }

// endTerm records how the term of run id ended: lost is the keeper's cause
// (nil when the leader stepped down), p a panic of the callback.
func (e *election) endTerm(ctx context.Context, t Token, id int64, lost error, p *jobPanic, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, e.c.callTimeout)
	defer cancel()
	if lost != nil {
		e.s.endedLate(ctx, t, id, lost.Error(), lost)
		return
	}
	var o Completion
	o.Result = termDetail
	if p != nil {
		o.Err = &PanicError{Value: p.value}
	}
	if err := e.s.FinishRun(ctx, t, id, o); err != nil {
		log.WarnContext(ctx, "fence: recording the end of the term failed", "run", id, "err", err)
	}
}

// callLeader runs OnStartedLeading and turns a panic into the value to
// re-panic with once the term is given up.
func callLeader(ctx context.Context, t Token, f func(context.Context, Token)) (p *jobPanic) {
	defer func() {
		if v := recover(); v != nil {
			p = &jobPanic{value: v}
		}
	}()
	f(ctx, t)
	return nil
}
