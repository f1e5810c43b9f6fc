package task

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fence"
)

// Errors of the effect ledger.
var (
	// ErrPayloadMismatch: the step key was used before with a different
	// payload. A key names one effect; a different effect needs another key.
	// Never retry it.
	ErrPayloadMismatch = errors.New("task: step key reused with a different payload")
	// ErrInFlight: this epoch claimed the step and has not recorded its
	// outcome yet. Retry later, once the attempt that claimed it is over.
	ErrInFlight = errors.New("task: step in flight in this epoch")
	// ErrInDoubt: the step was claimed and its effect may or may not have
	// happened (the claimer died, was superseded, or its effect failed in a
	// way that does not say), and no reconcile hook decided it.
	ErrInDoubt = errors.New("task: step in doubt")
	// ErrNotApplied marks an effect's error as definite: the effect did not
	// happen, so the step's claim is dropped and a retry acts again. Wrap it
	// with NotApplied.
	ErrNotApplied = errors.New("task: effect not applied")
)

// NotApplied marks err, returned by an effect, as definite: nothing of the
// effect happened (the request was refused before it was sent, a validation
// failed). Any other error leaves the step in doubt.
func NotApplied(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrNotApplied, err)
}

// EffectState is the state of a step in the ledger.
type EffectState string

// Effect states.
const (
	// Claimed: an epoch claimed the step and is acting, or was when it died
	// or was superseded.
	Claimed EffectState = "claimed"
	// Doubtful: the claimer's effect failed and may have happened.
	Doubtful EffectState = "doubt"
	// Committed: the effect happened and its result is stored.
	Committed EffectState = "committed"
)

// EffectRecord is a step's row in the ledger.
type EffectRecord struct {
	Task        string
	Step        string
	PayloadHash string // hex SHA-256 of the payload
	Epoch       int64  // the epoch holding the claim, or that committed it
	State       EffectState
	Result      []byte // when Committed
	ClaimedAt   time.Time
	UpdatedAt   time.Time // database time
	age         time.Duration
}

// Effect is what Do returns: the step's result and how it was obtained.
type Effect struct {
	Result []byte
	// Epoch is the epoch that committed the effect (an earlier one when
	// Replayed).
	Epoch int64
	// Replayed: the step was committed before; its stored result is
	// returned and the effect did not run.
	Replayed bool
	// Reconciled: the step was in doubt and the reconcile hook said the
	// effect had happened; its result is the hook's, and the effect did not
	// run again.
	Reconciled bool
}

// Doubt is a step whose effect may or may not have happened, handed to the
// reconcile hook.
type Doubt struct {
	Task        string
	Step        string
	Payload     []byte // the payload of the Do call that found the doubt
	PayloadHash string
	Epoch       int64 // the epoch whose claim is in doubt
	State       EffectState
	ClaimedAt   time.Time // database time
	// Current is the epoch asking; the hook runs on its behalf.
	Current Epoch
}

// Resolution is the reconcile hook's verdict on a Doubt.
type Resolution struct {
	// Applied: the effect happened. Result is recorded as its result and
	// the effect does not run again. When false, the effect did not happen
	// and this epoch runs it.
	Applied bool
	Result  []byte
}

// Reconciler decides a step in doubt, typically by asking the system the
// effect went to (a payment by its idempotency key, a row by its id). An
// error leaves the step in doubt and is returned by Do.
type Reconciler func(ctx context.Context, d Doubt) (Resolution, error)

// DoubtError is ErrInDoubt with the step's claim.
type DoubtError struct{ Doubt Doubt }

func (e *DoubtError) Error() string {
	return fmt.Sprintf("task: step %q of %q is in doubt: epoch %d claimed it (%s) and its effect may or may not have happened; "+
		"give the Ledger a reconcile hook (WithReconcile) that finds out", e.Doubt.Step, e.Doubt.Task, e.Doubt.Epoch, e.Doubt.State)
}

// Is makes errors.Is true for ErrInDoubt.
func (e *DoubtError) Is(target error) bool { return target == ErrInDoubt }

// Ledger runs each step's effect at most once per task, across epochs.
type Ledger struct {
	s            *Store
	reconcile    Reconciler
	inDoubtAfter time.Duration
}

// LedgerOption configures a Ledger.
type LedgerOption func(*Ledger)

// WithReconcile sets the hook that decides steps in doubt. Without one, Do
// returns a *DoubtError for them.
func WithReconcile(r Reconciler) LedgerOption { return func(l *Ledger) { l.reconcile = r } }

// WithInDoubtAfter makes a claim of the current epoch older than d (by the
// database clock) count as in doubt rather than in flight: for an epoch
// whose attempts can die while the epoch lives on (a server acting for a
// client that keeps its epoch). Default: never; a claim of the current
// epoch is in flight until its attempt records an outcome, and goes to the
// reconcile hook only in a later epoch.
func WithInDoubtAfter(d time.Duration) LedgerOption {
	return func(l *Ledger) { l.inDoubtAfter = d }
}

// NewLedger returns the effect ledger of s's tasks (schema version 6).
func NewLedger(s *Store, opts ...LedgerOption) (*Ledger, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: task: NewLedger needs a Store", fence.ErrInvalid)
	}
	l := &Ledger{s: s}
	for _, o := range opts {
		o(l)
	}
	if l.inDoubtAfter < 0 {
		return nil, fmt.Errorf("%w: task: WithInDoubtAfter(%v) is negative", fence.ErrInvalid, l.inDoubtAfter)
	}
	return l, nil
}

// PayloadHash is the hash the ledger keeps of a payload: hex SHA-256.
func PayloadHash(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

// maxRounds bounds Do's reads of a row that other epochs keep changing.
const maxRounds = 4

// Do runs fn as the effect of step (a tool call) of e's task at most once
// across every epoch of the task, and returns its result:
//
//   - A step no epoch claimed is claimed by e, in one statement with the
//     fence check (the task at e, e's lease valid), then fn runs, then its
//     result is recorded in a second fenced statement.
//   - A step some epoch committed returns the stored result (Replayed);
//     fn does not run.
//   - A step claimed by an earlier epoch that never recorded it, or whose
//     effect failed without NotApplied, is in doubt: the reconcile hook
//     decides whether it happened (Reconciled, fn does not run) or not (e
//     takes the claim over and runs fn).
//   - A step claimed by e itself and not yet recorded is ErrInFlight.
//   - The same step with another payload is ErrPayloadMismatch.
//   - A superseded e is refused before fn runs (*StaleError, wrapping
//     ErrStaleEpoch and fence.ErrLost).
//
// If fn fails, its error is returned; with NotApplied the claim is dropped
// (a retry runs fn again), otherwise the step is left in doubt. If e is
// superseded while fn runs, the record is refused (*StaleError) and the
// step is in doubt for the next epoch: fn's effect itself is outside the
// ledger, so an effect that must not land from a stale epoch carries the
// fence too (Store.Exec with e.Token, fencehttp).
//
// Do for one step must not run concurrently within one epoch: the second
// call gets ErrInFlight.
func (l *Ledger) Do(ctx context.Context, e Epoch, step string, payload []byte, fn func(ctx context.Context) ([]byte, error)) (Effect, error) {
	if err := validateStep(step); err != nil {
		return Effect{}, err
	}
	if fn == nil {
		return Effect{}, fmt.Errorf("%w: task: Do needs an effect function", fence.ErrInvalid)
	}
	s, f := l.s, e.Number()
	hash := PayloadHash(payload)
	for round := 0; round < maxRounds; round++ {
		_, err := s.fs.Exec(ctx, e.Token, s.q["effect_claim"], step, hash, e.Task, f, e.Task, step)
		switch {
		case err == nil:
			return l.act(ctx, e, step, fn)
		case errors.Is(err, fence.ErrNoMatch):
			// The lease is ours: the step has a row, or the task is not
			// running at e. The row says which.
		case errors.Is(err, fence.ErrLost), errors.Is(err, fence.ErrAmbiguous):
			return Effect{}, s.wrap(e, err)
		default:
			// A claim of the same key that raced this one makes this one
			// fail on the primary key; then the row is there to read.
			if exists, gerr := l.exists(ctx, e.Task, step); gerr != nil || !exists {
				return Effect{}, s.wrap(e, err)
			}
		}
		rec, found, err := l.get(ctx, e.Task, step)
		if err != nil {
			return Effect{}, err
		}
		if !found {
			// The lease is ours but the task is not running at e.
			return Effect{}, s.writeErr(ctx, e, fence.ErrNoMatch)
		}
		if rec.PayloadHash != hash {
			return Effect{}, fmt.Errorf("%w: step %q of %q was claimed with payload %.12s…, this call's is %.12s…; use another step key for another effect",
				ErrPayloadMismatch, step, e.Task, rec.PayloadHash, hash)
		}
		if rec.Epoch > f {
			return Effect{}, &StaleError{Task: e.Task, Epoch: f, Current: rec.Epoch}
		}
		switch {
		case rec.State == Committed:
			return Effect{Result: rec.Result, Epoch: rec.Epoch, Replayed: true}, nil
		case rec.State == Claimed && rec.Epoch == f && (l.inDoubtAfter == 0 || rec.age < l.inDoubtAfter):
			return Effect{}, fmt.Errorf("%w: step %q of %q was claimed by this epoch (%d) %v ago and has no outcome yet; retry once that attempt is over",
				ErrInFlight, step, e.Task, f, rec.age.Round(time.Millisecond))
		}
		d := Doubt{Task: e.Task, Step: step, Payload: payload, PayloadHash: hash, Epoch: rec.Epoch, State: rec.State, ClaimedAt: rec.ClaimedAt, Current: e}
		if l.reconcile == nil {
			return Effect{}, &DoubtError{Doubt: d}
		}
		res, err := l.reconcile(ctx, d)
		if err != nil {
			return Effect{}, fmt.Errorf("task: reconciling step %q of %q (claimed by epoch %d): %w", step, e.Task, rec.Epoch, err)
		}
		if res.Applied {
			_, err := s.fs.Exec(ctx, e.Token, s.q["effect_settle"], f, res.Result, e.Task, step, rec.Epoch)
			if errors.Is(err, fence.ErrNoMatch) {
				continue // the row changed meanwhile: read it again
			}
			if err != nil {
				return Effect{}, s.wrap(e, err)
			}
			return Effect{Result: res.Result, Epoch: f, Reconciled: true}, nil
		}
		_, err = s.fs.Exec(ctx, e.Token, s.q["effect_adopt"], f, e.Task, step, rec.Epoch)
		if errors.Is(err, fence.ErrNoMatch) {
			continue
		}
		if err != nil {
			return Effect{}, s.wrap(e, err)
		}
		return l.act(ctx, e, step, fn)
	}
	return Effect{}, fmt.Errorf("%w: task: step %q of %q changed under %d reads in a row; retry", fence.ErrUnavailable, step, e.Task, maxRounds)
}

// act runs fn under e's claim of step and records its outcome.
func (l *Ledger) act(ctx context.Context, e Epoch, step string, fn func(ctx context.Context) ([]byte, error)) (Effect, error) {
	s, f := l.s, e.Number()
	res, ferr := fn(ctx)
	if ferr != nil {
		// Record the outcome even if ctx ended with fn: it is what the next
		// attempt goes by.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		q := "effect_doubt"
		if errors.Is(ferr, ErrNotApplied) {
			q = "effect_release"
		}
		if _, err := s.fs.Exec(rctx, e.Token, s.q[q], e.Task, step, f); err != nil {
			return Effect{}, fmt.Errorf("task: step %q of %q: effect failed (%w), and recording that failed too, so the step stays claimed: %v", step, e.Task, ferr, err)
		}
		return Effect{}, ferr
	}
	if res == nil {
		res = []byte{} // committed with no result reads back as empty, not NULL
	}
	if _, err := s.fs.Exec(ctx, e.Token, s.q["effect_commit"], res, e.Task, step, f); err != nil {
		return Effect{}, fmt.Errorf("task: step %q of %q: the effect ran but its record was refused or failed; the step is in doubt: %w", step, e.Task, s.wrap(e, err))
	}
	return Effect{Result: res, Epoch: f}, nil
}

// Get reads step's record in the ledger; fence.ErrNotFound if no epoch
// claimed it.
func (l *Ledger) Get(ctx context.Context, task, step string) (EffectRecord, error) {
	rec, found, err := l.get(ctx, task, step)
	if err == nil && !found {
		err = fmt.Errorf("%w: step %q of task %q", fence.ErrNotFound, step, task)
	}
	return rec, err
}

// Effects lists a task's steps in the ledger, oldest claim first.
func (l *Ledger) Effects(ctx context.Context, task string) ([]EffectRecord, error) {
	rows, closeRows, err := l.s.query(ctx, l.s.q["effect_list"], task)
	if err != nil {
		return nil, fmt.Errorf("task: effects of %q: %w", task, err)
	}
	defer closeRows()
	var out []EffectRecord
	for rows.Next() {
		r := EffectRecord{Task: task}
		var claimed, updated, age int64
		if err := rows.Scan(&r.Step, &r.PayloadHash, &r.Epoch, &r.State, &r.Result, &claimed, &updated, &age); err != nil {
			return nil, err
		}
		r.ClaimedAt, r.UpdatedAt, r.age = time.UnixMilli(claimed), time.UnixMilli(updated), time.Duration(age)*time.Millisecond
		out = append(out, r)
	}
	return out, rows.Err()
}

func (l *Ledger) get(ctx context.Context, task, step string) (EffectRecord, bool, error) {
	r := EffectRecord{Task: task, Step: step}
	var claimed, updated, age int64
	err := l.s.queryRow(ctx, l.s.q["effect_get"], task, step).Scan(&r.PayloadHash, &r.Epoch, &r.State, &r.Result, &claimed, &updated, &age)
	if errors.Is(err, sql.ErrNoRows) {
		return EffectRecord{}, false, nil
	}
	if err != nil {
		return EffectRecord{}, false, fmt.Errorf("task: reading step %q of %q: %w", step, task, err)
	}
	r.ClaimedAt, r.UpdatedAt, r.age = time.UnixMilli(claimed), time.UnixMilli(updated), time.Duration(age)*time.Millisecond
	return r, true, nil
}

func (l *Ledger) exists(ctx context.Context, task, step string) (bool, error) {
	_, found, err := l.get(ctx, task, step)
	return found, err
}

func validateStep(step string) error {
	if step == "" || len(step) > fence.MaxNameLen {
		return fmt.Errorf("%w: step key must be 1 to %d bytes", fence.ErrInvalid, fence.MaxNameLen)
	}
	return nil
}
