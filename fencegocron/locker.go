package fencegocron

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/keep"
)

// JobFunc is a job that is told the token of the lease it runs under. Its
// context is cancelled, with a cause wrapping fence.ErrLost, the moment the
// lease is lost or can no longer be proven held; writes a stale run must
// not make should be fenced with tok (Store.Exec, Store.InTx), because
// cancellation is a signal, not a fence.
type JobFunc func(ctx context.Context, tok fence.Token) error

// Locker is a gocron.Locker over fence leases: before each run of a job
// every scheduler tries to acquire the lease named KeyPrefix+job name, and
// only the one that gets it runs that slot. The lease is renewed while the
// job runs and kept for the minimum hold after it started (WithMinHold).
// It is safe for concurrent use, and one Locker may serve many jobs.
//
// Each run is recorded in the run ledger (Store.Runs), as fence.Run records
// its runs: Lock starts a run with the lease's fence, Unlock finishes it
// with fenced completion. gocron does not tell a Locker how the task ended,
// so the status is the task's own only for a task from Job: succeeded, or
// failed with its error (a panic too). A run of any other task is recorded
// succeeded when gocron unlocks it, which then means "ended with the lease
// held", not "the task returned nil". A run whose lease was lost is
// recorded lost whichever way it ended.
type Locker struct {
	s *fence.Store
	c config

	mu sync.Mutex
	// pending holds the locks not yet claimed by a task from Job, by the
	// context gocron passed to Lock (see Job).
	pending map[context.Context][]*lock
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker over s. The options that apply are WithTTL,
// WithRenewEvery, WithRenewDeadline, WithMinHold, WithKeyPrefix and
// WithLogger.
func NewLocker(s *fence.Store, opts ...Option) (*Locker, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: fencegocron: store is nil", fence.ErrInvalid)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Locker{s: s, c: c, pending: make(map[context.Context][]*lock)}, nil
}

// Lock implements gocron.Locker. It acquires the job's lease without
// waiting and records a running run: if another scheduler holds the lease,
// the error wraps fence.ErrHeld and gocron skips this run here
// (gocron.AfterLockError sees the error); if the run cannot be recorded,
// the lease is released and the run skipped too.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	start := time.Now()
	lease, err := l.s.Acquire(ctx, l.c.keyPrefix+key, l.c.ttl)
	if err != nil {
		return nil, fmt.Errorf("fencegocron: job %q not run here: %w", key, err)
	}
	tok := lease.Token
	id, err := l.s.StartRun(ctx, tok, nil)
	if err != nil {
		l.release(ctx, tok)
		return nil, fmt.Errorf("fencegocron: job %q not run here: recording the run failed: %w", key, err)
	}
	lk := &lock{l: l, tok: tok, runID: id, acquiredAt: start}
	lk.k = keep.Start(ctx, l.c.keeper(l.s, tok), start)
	l.register(ctx, lk)
	l.c.log.Debug("fencegocron: locked", "lease", tok.Lease, "fence", tok.Fence, "run", id)
	return lk, nil
}

func (l *Locker) release(ctx context.Context, tok fence.Token) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	if err := l.s.Release(ctx, tok); err != nil && !errors.Is(err, fence.ErrLost) {
		l.c.log.Warn("fencegocron: release failed; the lease lapses at its TTL", "lease", tok.Lease, "err", err)
	}
}

// Job returns a task function for gocron.NewTask that runs fn with the
// token of the lock this Locker took for the run. Use it with a scheduler
// or job that has this Locker, and give the job a name (gocron.WithName):
// the name is the lease name, and gocron's default, the function's name,
// would be the same for every task Job returns.
//
// gocron gives a Lock no way to pass anything to the task, but it calls
// Lock with the job's context and then the task with that same context
// (gocron passes it to a task whose first parameter is a context.Context).
// So Lock files the lock under that context, and the task claims the
// oldest unclaimed lock filed under it. Each lock is claimed at most once,
// so no two runs ever share a token, even if a paused run claims late.
// If no lock is found the task returns ErrNotLocked without calling fn.
//
// If fn returns nil after the lease was lost, the task returns the loss,
// so gocron reports the run as failed (gocron.AfterJobRunsWithError).
// What the task returns (or a panic of fn) is what Unlock records in the
// run ledger.
func (l *Locker) Job(fn JobFunc) func(ctx context.Context) error {
	return func(ctx context.Context) (err error) {
		lk := l.claim(ctx)
		if lk == nil {
			return ErrNotLocked
		}
		defer func() {
			if v := recover(); v != nil {
				lk.setJobErr(&fence.PanicError{Value: v})
				panic(v)
			}
			lk.setJobErr(err)
		}()
		// Carrying the keeper, so that the store's writes on it are refused
		// unsent from the renew deadline on, even before the keeper's timer ran.
		err = fn(keep.NewContext(lk.k.Context(), lk.k), lk.tok)
		if err == nil {
			if lost := lk.k.Lost(); lost != nil {
				return fmt.Errorf("fencegocron: job finished after its lease was lost; its unfenced effects may overlap a newer run: %w", lost)
			}
		}
		return err
	}
}

func (l *Locker) register(ctx context.Context, lk *lock) {
	// A context whose dynamic type cannot be a map key is never gocron's
	// (a *context.cancelCtx); such a lock simply cannot be claimed.
	if ctx == nil || !reflect.TypeOf(ctx).Comparable() {
		return
	}
	lk.filed = ctx
	l.mu.Lock()
	l.pending[ctx] = append(l.pending[ctx], lk)
	l.mu.Unlock()
}

func (l *Locker) claim(ctx context.Context) *lock {
	if ctx == nil || !reflect.TypeOf(ctx).Comparable() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.pending[ctx]
	if len(q) == 0 {
		return nil
	}
	lk := q[0]
	l.setPending(ctx, q[1:])
	return lk
}

func (l *Locker) unregister(lk *lock) {
	if lk.filed == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.pending[lk.filed]
	for i, x := range q {
		if x == lk {
			l.setPending(lk.filed, append(q[:i:i], q[i+1:]...))
			return
		}
	}
}

func (l *Locker) setPending(ctx context.Context, q []*lock) {
	if len(q) == 0 {
		delete(l.pending, ctx)
		return
	}
	l.pending[ctx] = q
}

// unlockTimeout bounds the database calls of Unlock, which gocron makes on
// the job's goroutine.
const unlockTimeout = 5 * time.Second

var errUnlocked = errors.New("fencegocron: run finished")

// lock is one run's acquisition.
type lock struct {
	l          *Locker
	tok        fence.Token
	runID      int64
	acquiredAt time.Time // local time from just before the acquire
	k          *keep.Keeper
	filed      context.Context // the key in l.pending, if filed

	mu     sync.Mutex
	jobErr error // what the task from Job returned

	once sync.Once
	err  error
}

func (lk *lock) setJobErr(err error) {
	lk.mu.Lock()
	lk.jobErr = err
	lk.mu.Unlock()
}

// Unlock implements gocron.Lock. It stops the renewals, finishes the run
// with fenced completion (see Locker for the status recorded) and, if the
// run took less than the minimum hold, keeps the lease until the hold ends
// (a renewal to the time left) instead of releasing it, so a scheduler
// whose timer fires a little later finds the slot taken. It returns an
// error wrapping fence.ErrLost if the lease was lost during the run
// (gocron ignores Unlock's error; the task from Job reports it). Later
// calls return the first call's result.
func (lk *lock) Unlock(ctx context.Context) error {
	lk.once.Do(func() { lk.err = lk.unlock(ctx) })
	return lk.err
}

func (lk *lock) unlock(ctx context.Context) error {
	l := lk.l
	l.unregister(lk)
	lost := lk.k.Stop(errUnlocked)
	// Unlock runs when gocron's job context may be cancelled (shutdown);
	// the completion, the hold and the release must happen all the same.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	if lost != nil {
		_ = l.s.MarkRunLost(bg, lk.runID, lk.tok.Fence, lost.Error())
		if errors.Is(lost, fence.ErrUnproven) {
			// Not refused, only unproven: the lease may still be ours, so
			// give it up rather than leave it held until its TTL.
			_ = l.s.Release(bg, lk.tok)
		}
		return lost
	}
	lk.mu.Lock()
	jobErr := lk.jobErr
	lk.mu.Unlock()
	if err := l.s.FinishRun(bg, lk.tok, lk.runID, fence.Completion{Err: jobErr}); err != nil {
		if errors.Is(err, fence.ErrLost) {
			return err // FinishRun recorded the run lost
		}
		// Unknown or failed: a sweep (Store.SweepRuns) settles the run
		// once the lease is gone; the lease is still given up below.
		l.c.log.Warn("fencegocron: recording the end of the run failed", "lease", lk.tok.Lease, "run", lk.runID, "err", err)
	}
	if left := l.c.minHold - time.Since(lk.acquiredAt); left >= fence.MinTTL {
		_, err := l.s.Renew(bg, lk.tok, left)
		if err != nil && !errors.Is(err, fence.ErrLost) {
			// Releasing now would end the hold early; the lease lapses at
			// its TTL instead, which only delays the next slot.
			l.c.log.Warn("fencegocron: could not shorten the lease to the min hold; it lapses at its TTL", "lease", lk.tok.Lease, "err", err)
		}
		return err
	}
	err := l.s.Release(bg, lk.tok)
	if err != nil && !errors.Is(err, fence.ErrLost) {
		l.c.log.Warn("fencegocron: release failed; the lease lapses at its TTL", "lease", lk.tok.Lease, "err", err)
	}
	return err
}
