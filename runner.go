package fence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencekit/fence/internal/keep"
)

// Job is the work Run does while it holds the lease. Its context carries the
// token (TokenFrom) and is cancelled, with a cause wrapping ErrLost
// (context.Cause), the moment the runner can no longer prove that the lease
// is held. Writes that a stale worker must not make should be fenced with
// the token (Store.Exec, Store.InTx): cancellation is a signal, not a fence.
type Job func(ctx context.Context) error

// RunOutcome is how a Run ended (Result.Outcome).
type RunOutcome string

const (
	// Completed: the job returned nil and its completion was accepted.
	Completed RunOutcome = "completed"
	// Failed: the job returned an error, recorded with fenced completion.
	Failed RunOutcome = "failed"
	// NotAcquired: someone else held the lease (fail-fast mode).
	NotAcquired RunOutcome = "not-acquired"
	// Lost: authority was lost (or could not be proven) while the job ran.
	Lost RunOutcome = "lost"
	// Rejected: the job finished but its completion was refused as stale.
	Rejected RunOutcome = "rejected"
	// Unknown: the job finished, but the answer to its completion was lost
	// and reading the run back could not settle it: the run may be recorded
	// as succeeded or failed, or still be running until swept lost. Err
	// wraps ErrAmbiguous; JobErr is the job's own result.
	Unknown RunOutcome = "unknown"
)

// Result says what a Run did.
type Result struct {
	Outcome RunOutcome
	Token   Token
	RunID   int64
	// JobErr is the job's own error, if it returned one.
	JobErr error
	// Err is why the run did not complete: ErrHeld, a LostError, or a
	// database error; nil when Outcome is Completed or Failed.
	Err      error
	Started  time.Time // local clock
	Duration time.Duration
}

type runConfig struct {
	ttl, renewEvery, deadline, callTimeout, minHold time.Duration
	retention                                       time.Duration
	retry                                           time.Duration // Elect's follower poll
	loc                                             *time.Location
	retries                                         int
	retryBackoff, catchUp                           time.Duration
	wait                                            bool
	detail                                          any
	onStarted                                       func(ctx context.Context, t Token)
	onLost                                          func(t Token, err error)
	onFinished                                      func(r Result)
	log                                             *slog.Logger
}

// RunOption configures Run and Schedule.
type RunOption func(*runConfig)

// WithTTL sets the lease TTL (default 30s). Renewals happen every TTL/3 and
// the job is cancelled when none succeeded within 2/3 TTL, unless set
// otherwise.
func WithTTL(d time.Duration) RunOption { return func(c *runConfig) { c.ttl = d } }

// WithRenewEvery sets the renewal interval (default TTL/3).
func WithRenewEvery(d time.Duration) RunOption { return func(c *runConfig) { c.renewEvery = d } }

// WithRenewDeadline sets how long after the start of the last successful
// renewal (or of the acquisition) the job may go on without another one
// (default 2/3 TTL). It must be below the TTL: the gap is the margin for a
// slow database and for the job to notice its cancellation before the lease
// can lapse and be taken.
func WithRenewDeadline(d time.Duration) RunOption { return func(c *runConfig) { c.deadline = d } }

// WithCallTimeout bounds each renewal call (default: renew interval, and
// never past the deadline), so a slow database cannot hold a renewal open
// until the lease lapses.
func WithCallTimeout(d time.Duration) RunOption { return func(c *runConfig) { c.callTimeout = d } }

// WithWait makes Run wait for the lease (AcquireWait, bounded by ctx)
// instead of returning NotAcquired when it is held.
func WithWait() RunOption { return func(c *runConfig) { c.wait = true } }

// WithDetail stores v (as JSON) on the run when it starts.
func WithDetail(v any) RunOption { return func(c *runConfig) { c.detail = v } }

// OnStarted is called when the lease is held and the run recorded, before
// the job (under Schedule, only on the replica that runs the slot).
func OnStarted(f func(ctx context.Context, t Token)) RunOption {
	return func(c *runConfig) { c.onStarted = f }
}

// OnLost is called once if authority is lost while the job runs, with the cause.
func OnLost(f func(t Token, err error)) RunOption { return func(c *runConfig) { c.onLost = f } }

// OnFinished is called with the result when Run is about to return, and
// under Schedule after each slot (or retry) that this replica ran: a
// replica that found the slot taken does not call it (ShedLock's
// behaviour), so counting its calls counts runs. Run in fail-fast mode
// does call it with NotAcquired, as that is Run's own result.
func OnFinished(f func(r Result)) RunOption { return func(c *runConfig) { c.onFinished = f } }

// WithRunLogger sets the runner's logger (default: the store's).
func WithRunLogger(l *slog.Logger) RunOption { return func(c *runConfig) { c.log = l } }

// WithMinHold keeps the lease for at least d after a scheduled slot starts,
// even when the job is done sooner, so replicas whose timers differ slightly
// cannot run the same slot twice (ShedLock's lockAtLeastFor). Schedule only;
// default: half the slot period.
func WithMinHold(d time.Duration) RunOption { return func(c *runConfig) { c.minHold = d } }

func (s *Store) runConfig(opts []RunOption) (runConfig, error) {
	c := runConfig{ttl: DefaultTTL, log: s.log}
	for _, o := range opts {
		o(&c)
	}
	if err := ValidateTTL(c.ttl); err != nil {
		return c, err
	}
	if c.renewEvery == 0 {
		c.renewEvery = c.ttl / 3
	}
	if c.deadline == 0 {
		c.deadline = c.ttl * 2 / 3
	}
	if c.callTimeout == 0 {
		c.callTimeout = c.renewEvery
	}
	if c.retry == 0 {
		c.retry = c.renewEvery
	}
	switch {
	case c.renewEvery <= 0 || c.renewEvery >= c.deadline:
		return c, fmt.Errorf("%w: renew interval %v must be positive and below the renew deadline %v", ErrInvalid, c.renewEvery, c.deadline)
	case c.deadline >= c.ttl:
		return c, fmt.Errorf("%w: renew deadline %v must be below the TTL %v", ErrInvalid, c.deadline, c.ttl)
	case c.callTimeout <= 0:
		return c, fmt.Errorf("%w: call timeout %v must be positive", ErrInvalid, c.callTimeout)
	case c.retry < time.Millisecond:
		return c, fmt.Errorf("%w: retry period %v must be at least 1ms", ErrInvalid, c.retry)
	case c.minHold < 0:
		return c, fmt.Errorf("%w: min hold %v is negative", ErrInvalid, c.minHold)
	case c.retries < 0 || c.retries > 0 && c.retryBackoff <= 0:
		return c, fmt.Errorf("%w: retry %d times, %v apart: want a count of at least 0 and a positive backoff", ErrInvalid, c.retries, c.retryBackoff)
	case c.catchUp < 0:
		return c, fmt.Errorf("%w: catch-up window %v is negative", ErrInvalid, c.catchUp)
	case c.retention != 0 && c.retention < time.Millisecond:
		return c, fmt.Errorf("%w: run retention %v must be at least 1ms, or 0 to keep every run", ErrInvalid, c.retention)
	}
	return c, nil
}

type ctxKey int

const (
	tokenKey ctxKey = iota
	runIDKey
	resultKey
)

// LapseTime returns the local time at which the lease a Job (or a leader,
// in OnStartedLeading's context) runs under could
// first lapse: the start of the last successful renewal (or of the acquire)
// plus the TTL, measured on a clock that counts time the host spent
// suspended (CLOCK_BOOTTIME on Linux) and returned as a time.Time relative to
// now. Work that must not outlive the lease (a child process, an external
// call) has to be stopped before then.
func LapseTime(ctx context.Context) (time.Time, bool) {
	k, ok := keep.FromContext(ctx)
	if !ok {
		return time.Time{}, false
	}
	return k.LapseTime(), true
}

// TokenFrom returns the token of the lease a Job runs under.
func TokenFrom(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(tokenKey).(Token)
	return t, ok
}

// RunIDFrom returns the run ledger id of the run a Job is part of.
func RunIDFrom(ctx context.Context) (int64, bool) {
	id, ok := ctx.Value(runIDKey).(int64)
	return id, ok
}

type resultBox struct {
	mu   sync.Mutex
	v    any
	code *int
}

// SetExitCode records an exit code with the job's fenced completion (for jobs
// that run an external command). Only inside a Job run by Run or Schedule.
func SetExitCode(ctx context.Context, code int) {
	if b, ok := ctx.Value(resultKey).(*resultBox); ok {
		b.mu.Lock()
		b.code = &code
		b.mu.Unlock()
	}
}

// SetResult records v as the job's result, stored as JSON with its fenced
// completion. Only inside a Job run by Run or Schedule.
func SetResult(ctx context.Context, v any) {
	if b, ok := ctx.Value(resultKey).(*resultBox); ok {
		b.mu.Lock()
		b.v = v
		b.mu.Unlock()
	}
}

// ErrUnproven is wrapped (with ErrLost) by the cancellation cause when no
// renewal succeeded within the renew deadline: the lease may still be held,
// but the runner can no longer prove it, so the job must stop.
var ErrUnproven = errors.New("fence: no renewal succeeded within the renew deadline")

// UnprovenError is the cause given to a job cancelled at the renew deadline.
type UnprovenError struct {
	Token    Token
	Deadline time.Duration
	Last     error // the last renewal error, if any
}

func (e *UnprovenError) Error() string {
	msg := fmt.Sprintf("fence: lease %q fence %d: no renewal succeeded within %v; stopping before the lease can lapse", e.Token.Lease, e.Token.Fence, e.Deadline.Round(time.Millisecond))
	if e.Last != nil {
		msg += ": " + e.Last.Error()
	}
	return msg
}

// Is makes errors.Is true for ErrUnproven and ErrLost.
func (e *UnprovenError) Is(target error) bool { return target == ErrUnproven || target == ErrLost }

// Unwrap gives the last renewal error, but not as ErrAmbiguous when that
// renewal's outcome was unknown (its message still says so): this error
// is the cause of a job's context and so of every call refused on it, and
// a call refused before it was sent is definite.
func (e *UnprovenError) Unwrap() error {
	if a, ok := e.Last.(*AmbiguousError); ok {
		return a.Err
	}
	return e.Last
}

// Run acquires the lease name, records a run, and runs job while renewing
// the lease every TTL/3. It cancels the job's context the moment a renewal is
// rejected, or when no renewal has succeeded within the renew deadline
// (measured on the boot clock, which counts a suspend, from the start of the last
// successful renewal), finishes the run with fenced completion, and releases
// the lease. The error is non-nil only for bad options or when ctx ended
// before the lease was acquired; everything else is in the Result.
//
// Whether a stall ends as Lost or Rejected depends on who notices first: the
// renewal keeper (Lost, the job's context cancelled) or the fenced completion
// (Rejected). Both mean the same for the caller: nothing after the takeover
// was committed by this run. Either way, when a newer owner's run had
// already started (and marked this one abandoned), the ledger records when
// this run really ended, so that the overlap shows (RunInfo.Error then ends
// in "completion refused" or "stopped late: …").
//
// If job panics, Run records the run as failed (the job error is a
// *PanicError), releases the lease, calls OnFinished, and then panics again
// with the job's value: a panic is a bug to surface, not an outcome to hide.
func Run(ctx context.Context, s *Store, name string, job Job, opts ...RunOption) (Result, error) {
	c, err := s.runConfig(opts)
	if err != nil {
		return Result{}, err
	}
	if err := ValidateName(name); err != nil {
		return Result{}, err
	}
	start := time.Now()
	var l Lease
	if c.wait {
		l, err = s.AcquireWait(ctx, name, c.ttl)
	} else {
		l, err = s.Acquire(ctx, name, c.ttl)
	}
	if err != nil {
		r := Result{Outcome: NotAcquired, Err: err, Started: start}
		if !errors.Is(err, ErrHeld) && ctx.Err() != nil {
			return r, err
		}
		c.finished(r)
		return r, nil
	}
	if !l.began.IsZero() {
		// The call that committed this generation, not the wait before it:
		// with WithWait the renew deadline must not be spent waiting.
		start = l.began
	}
	return s.runHeld(ctx, c, l, start, job, 0), nil
}

// RunHeld is Run for a lease the caller already acquired (with Acquire or
// AcquireWait, perhaps after other bookkeeping): it records a run, keeps the
// lease renewed while job runs, cancels the job when authority is lost or
// unproven, finishes the run with fenced completion and releases the lease.
// acquiredAt should be the local time (time.Now(), not a skewed clock) from
// just before the acquire call (the renew deadline counts from it); zero means
// the time Acquire or AcquireWait recorded for l, or now for a Lease built by
// hand, which is later than the truth by the acquire's round trip.
func RunHeld(ctx context.Context, s *Store, l Lease, acquiredAt time.Time, job Job, opts ...RunOption) (Result, error) {
	c, err := s.runConfig(append([]RunOption{WithTTL(l.TTL)}, opts...))
	if err != nil {
		return Result{}, err
	}
	if err := validateToken(l.Token); err != nil {
		return Result{}, err
	}
	if acquiredAt.IsZero() {
		acquiredAt = l.began
	}
	if acquiredAt.IsZero() {
		acquiredAt = time.Now()
	}
	return s.runHeld(ctx, c, l, acquiredAt, job, 0), nil
}

func (c runConfig) finished(r Result) {
	if c.onFinished != nil {
		c.onFinished(r)
	}
}

// runHeld runs job under an acquired lease. acquiredAt is the local time from
// before the acquire call, the latest moment the lease can have started.
// minHoldUntil, when not zero, is kept as the lease's end after the job.
//
// Local deadlines are measured on the local monotonic clock (time.Now), never
// on the store's Clock: an injected clock shifts wall time, and a deadline
// computed from two different frames is wrong by the shift.
func (s *Store) runHeld(ctx context.Context, c runConfig, l Lease, acquiredAt time.Time, job Job, minHold time.Duration) (r Result) {
	t := l.Token
	r = Result{Token: t, Started: acquiredAt}
	log := c.log.With("lease", t.Lease, "fence", t.Fence)
	bg := context.WithoutCancel(ctx)
	defer func() {
		// r is the named result: this assignment reaches the caller.
		r.Duration = time.Since(acquiredAt)
		c.finished(r)
	}()

	id, err := s.StartRun(ctx, t, c.detail)
	if err != nil {
		r.Outcome, r.Err = Lost, err
		if !errors.Is(err, ErrLost) {
			r.Outcome = Failed
		}
		s.releaseQuietly(bg, t, log)
		return r
	}
	r.RunID = id
	box := &resultBox{}
	k := s.startKeeper(ctx, c, t, acquiredAt, log)
	// Stopped as soon as the job returned, so a renewal cannot race the
	// completion; the deferred call covers a return before that.
	var stopped bool
	stop := func() {
		if !stopped {
			stopped = true
			k.Stop(nil)
		}
	}
	defer stop()
	jctx := context.WithValue(k.Context(), tokenKey, t)
	jctx = context.WithValue(jctx, runIDKey, id)
	jctx = context.WithValue(jctx, resultKey, box)
	jctx = keep.NewContext(jctx, k)

	if c.onStarted != nil {
		c.onStarted(jctx, t)
	}
	log.InfoContext(ctx, "fence: job started", "run", id)
	panicked, jobErr := callJob(jctx, job)
	stop()
	r.JobErr = jobErr
	if panicked != nil {
		// Record the run as failed and give the lease up before the panic
		// goes on up the stack: otherwise the run stays "running" and the
		// lease held for its TTL by a goroutine that no longer exists.
		fctx, fcancel := context.WithTimeout(bg, c.callTimeout)
		err := s.FinishRun(fctx, t, id, Completion{Err: jobErr})
		fcancel()
		r.Outcome, r.Err = Failed, nil
		if k.Lost() != nil || errors.Is(err, ErrLost) {
			r.Outcome, r.Err = Lost, k.Lost()
			if r.Err == nil {
				r.Outcome, r.Err = Rejected, err
			}
			mctx, mcancel := context.WithTimeout(bg, c.callTimeout)
			s.endedLate(mctx, t, id, jobErr.Error(), k.Lost())
			mcancel()
		}
		log.ErrorContext(ctx, "fence: job panicked", "run", id, "panic", panicked.value)
		s.releaseQuietly(bg, t, log)
		panic(panicked.value)
	}

	if cause := k.Lost(); cause != nil {
		r.Outcome, r.Err = Lost, cause
		// Bounded: during an outage the mark may not get through, and the
		// caller must hear about the loss now, not after TCP timeouts.
		mctx, mcancel := context.WithTimeout(bg, c.callTimeout)
		s.endedLate(mctx, t, id, cause.Error(), cause)
		mcancel()
		log.WarnContext(ctx, "fence: job stopped, lease lost", "run", id, "cause", cause)
		// Unproven is not refused: the lease may still be ours; give it up
		// rather than leave it held until its TTL.
		s.releaseQuietly(bg, t, log)
		return r
	}
	box.mu.Lock()
	res, code := box.v, box.code
	box.mu.Unlock()
	fctx, fcancel := context.WithTimeout(bg, c.callTimeout)
	err = s.FinishRun(fctx, t, id, Completion{Err: jobErr, Result: res, ExitCode: code})
	fcancel()
	switch {
	case errors.Is(err, ErrLost):
		r.Outcome, r.Err = Rejected, err
		log.WarnContext(ctx, "fence: completion rejected as stale", "run", id, "err", err)
		return r
	case errors.Is(err, ErrAmbiguous):
		// Not "failed": the database may say succeeded.
		r.Outcome, r.Err = Unknown, err
		log.WarnContext(ctx, "fence: completion outcome unknown", "run", id, "err", err)
	case err != nil:
		r.Outcome, r.Err = Failed, err
		log.ErrorContext(ctx, "fence: completion failed", "run", id, "err", err)
	case jobErr != nil:
		r.Outcome = Failed
		log.InfoContext(ctx, "fence: job failed", "run", id, "err", jobErr)
	default:
		r.Outcome = Completed
		log.InfoContext(ctx, "fence: job completed", "run", id)
	}
	if minHold > 0 {
		if left := minHold - time.Since(acquiredAt); left >= MinTTL {
			// Keep the lease until the end of the minimum hold instead of
			// releasing it, so no replica can start this slot again.
			if _, err := s.Renew(bg, t, left); err == nil {
				return r
			}
		}
	}
	s.releaseQuietly(bg, t, log)
	return r
}

// jobPanic carries a job's panic value past the bookkeeping that follows it.
type jobPanic struct{ value any }

// PanicError is the job error recorded for a job that panicked; Run and
// Schedule re-panic with the original value after recording it.
type PanicError struct{ Value any }

func (e *PanicError) Error() string { return fmt.Sprintf("fence: job panicked: %v", e.Value) }

// callJob runs job and turns a panic into an error plus the value to re-panic with.
func callJob(ctx context.Context, job Job) (p *jobPanic, err error) {
	defer func() {
		if v := recover(); v != nil {
			p, err = &jobPanic{value: v}, &PanicError{Value: v}
		}
	}()
	return nil, job(ctx)
}

func (s *Store) releaseQuietly(ctx context.Context, t Token, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.Release(ctx, t); err != nil && !errors.Is(err, ErrLost) {
		log.WarnContext(ctx, "fence: release failed; the lease will lapse at its TTL", "err", err)
	}
}

// startKeeper starts renewing t (acquired at the local time acquiredAt)
// as c says, with a context derived from ctx that is cancelled, with a
// cause wrapping ErrLost, when a renewal is refused or none succeeded within
// the renew deadline.
func (s *Store) startKeeper(ctx context.Context, c runConfig, t Token, acquiredAt time.Time, log *slog.Logger) *keep.Keeper {
	return keep.Start(ctx, keep.Config{
		TTL:         c.ttl,
		RenewEvery:  c.renewEvery,
		Deadline:    c.deadline,
		CallTimeout: c.callTimeout,
		Renew: func(ctx context.Context) error {
			_, err := s.Renew(ctx, t, c.ttl)
			return err
		},
		Refused: func(err error) bool { return errors.Is(err, ErrLost) },
		Unproven: func(last error) error {
			return &UnprovenError{Token: t, Deadline: c.deadline, Last: last}
		},
		OnLost: func(cause error) {
			if c.onLost != nil {
				c.onLost(t, cause)
			}
		},
		OnRetry: func(err error) {
			log.WarnContext(ctx, "fence: renewal failed, retrying", "err", err)
		},
	}, acquiredAt)
}
