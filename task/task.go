// Package task fences long-running agent tasks by epoch. A task can have
// several executors over its life — a model switch, a cancel and resume, a
// crashed worker replaced by another — and every tool result, state change
// and final summary must come from the current plan only: "an old plan may
// run to natural completion, but it cannot mark the new plan complete."
//
// A task's epoch is the fence of a lease named "task:<id>" in the core
// store. Start and Resume acquire that lease (a new fence, so a new epoch),
// Replan revokes it and acquires it again (the old executor's token goes
// stale), Cancel revokes it. So there is one token, Epoch, that carries
// both the executor's liveness lease and the plan version: a write checks
// them together and no caller can check one and forget the other. Every
// write goes through the core store's fenced Exec: the check and the write
// are one statement at the database.
//
// # The effect ledger
//
// A tool call's effect (a charge, an email, a write elsewhere) must happen
// at most once per step of a task, even when a newer epoch retries a step
// an older one completed just before it lost the lease. Ledger keys each
// effect by (task, step), never by the epoch; the epoch's fence is a
// precondition checked in the same statement as each write of the ledger:
//
//	// chargeOnce charges order 17 at most once, whichever epoch of the task asks.
//	func chargeOnce(ctx context.Context, ts *task.Store, e task.Epoch, payload []byte) (task.Effect, error) {
//		l, err := task.NewLedger(ts, task.WithReconcile(askThePaymentProvider))
//		if err != nil {
//			return task.Effect{}, err
//		}
//		return l.Do(ctx, e, "charge-order-17", payload, func(ctx context.Context) ([]byte, error) {
//			return charge(ctx, e.IdempotencyKey("charge-order-17"), payload)
//		})
//	}
//
// Do claims the step before the effect runs and records its result after.
// A newer epoch retrying a committed step gets the stored result (Replayed)
// and the effect does not run; an older epoch is refused (*StaleError); a
// step claimed by an epoch that died or was superseded between its effect
// and its record is in doubt and goes to the reconcile hook, which says
// whether the effect happened; a step claimed by the same epoch and not yet
// recorded is ErrInFlight (retry later); the same step with another payload
// is ErrPayloadMismatch (never retry). An effect's error leaves the step in
// doubt unless the effect wraps it with NotApplied.
//
// What the ledger cannot do is stop an effect outside the database that a
// superseded epoch already started: its record is refused and the step goes
// to the reconcile hook, but the effect itself has left. Give such an
// effect the fence as well (fencehttp carries it to an HTTP service, which
// then refuses the stale call) and the step's IdempotencyKey, which is the
// same in every epoch, so the service can answer a retry with the first
// outcome.
package task

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencekit/fence"
)

//go:embed queries/*.sql
var queries embed.FS

// State of a task.
type State string

// Task states.
const (
	Pending   State = "pending"
	Running   State = "running"
	Succeeded State = "succeeded"
	Failed    State = "failed"
	Cancelled State = "cancelled"
)

// Errors specific to tasks. A refused write because the epoch is stale
// wraps fence.ErrLost (and ErrStaleEpoch).
var (
	ErrStaleEpoch = errors.New("task: epoch superseded")
	ErrFinished   = errors.New("task: task already finished")
	ErrExists     = errors.New("task: task already exists")
)

// Plan is what an executor follows: the model and the plan text or JSON.
type Plan struct {
	Model string
	Text  string
}

// Task is a task row.
type Task struct {
	ID        string
	Epoch     int64
	State     State
	Plan      Plan
	Summary   string
	Error     string
	CreatedAt time.Time // database time
	UpdatedAt time.Time
}

// Step is a recorded step (a tool result) of one epoch.
type Step struct {
	Task      string
	Epoch     int64
	Key       string
	Result    string
	CreatedAt time.Time
}

// Epoch is an executor's authority over one task: the token of the task's
// lease, whose fence is the epoch number.
type Epoch struct {
	Task  string
	Token fence.Token
}

// Number is the epoch number.
func (e Epoch) Number() int64 { return e.Token.Fence }

// IdempotencyKey is the key of step's external call, for a system that
// deduplicates by key: the same for every epoch of the task, so a newer
// epoch retrying a step an older one completed gets the first outcome back
// instead of acting twice. The epoch travels separately, as the fence.
func (e Epoch) IdempotencyKey(step string) string {
	return fence.IdempotencyKey(e.Token, "task", e.Task, step)
}

// Store keeps tasks in the core store's database (schema version 2 or
// later; fence.Store.Migrate creates the tables).
type Store struct {
	fs  *fence.Store
	ttl time.Duration
	q   map[string]string
}

// Option configures a Store.
type Option func(*Store)

// WithTTL sets the executor lease TTL (default 30s).
func WithTTL(d time.Duration) Option { return func(s *Store) { s.ttl = d } }

// New returns a task store over fs.
func New(fs *fence.Store, opts ...Option) (*Store, error) {
	s := &Store{fs: fs, ttl: fence.DefaultTTL, q: map[string]string{}}
	for _, o := range opts {
		o(s)
	}
	if err := fence.ValidateTTL(s.ttl); err != nil {
		return nil, err
	}
	now := fs.NowSQL()
	entries, err := queries.ReadDir("queries")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := queries.ReadFile("queries/" + e.Name())
		if err != nil {
			return nil, err
		}
		q := strings.NewReplacer("{{prefix}}", fs.Prefix(), "{{now_ms}}", now).Replace(string(b))
		s.q[strings.TrimSuffix(e.Name(), ".sql")] = fs.Rebind(q)
	}
	return s, nil
}

func leaseName(id string) string { return "task:" + id }

func validateID(id string) error {
	if id == "" || len(id) > fence.MaxNameLen-len("task:") {
		return fmt.Errorf("%w: task id must be 1 to %d bytes", fence.ErrInvalid, fence.MaxNameLen-len("task:"))
	}
	return fence.ValidateName(leaseName(id))
}

// Create adds a pending task. ErrExists if the id is taken.
func (s *Store) Create(ctx context.Context, id string, p Plan) error {
	if err := validateID(id); err != nil {
		return err
	}
	if _, err := s.exec(ctx, s.q["create"], id, p.Model, p.Text); err != nil {
		if _, gerr := s.Get(ctx, id); gerr == nil {
			return fmt.Errorf("%w: %q", ErrExists, id)
		}
		return fmt.Errorf("task: create %q: %w", id, err)
	}
	return nil
}

// Start makes the caller the task's executor: it acquires the task's lease
// and moves the task to running at the new epoch. If another executor's
// lease is still valid the error wraps fence.ErrHeld; if the task is
// finished, ErrFinished.
func (s *Store) Start(ctx context.Context, id string) (Epoch, error) {
	if err := validateID(id); err != nil {
		return Epoch{}, err
	}
	l, err := s.fs.Acquire(ctx, leaseName(id), s.ttl)
	if err != nil {
		return Epoch{}, err
	}
	e := Epoch{Task: id, Token: l.Token}
	f := e.Number()
	if _, err := s.fs.Exec(ctx, e.Token, s.q["claim"], f, id, f); err != nil {
		_ = s.fs.Release(context.WithoutCancel(ctx), e.Token)
		return Epoch{}, s.explain(ctx, id, err)
	}
	return e, nil
}

// Resume is Start for a task whose executor died, stopped or was cancelled:
// it succeeds once the old executor's lease has lapsed (by the database
// clock), was released or revoked. Succeeded and failed tasks stay finished.
func (s *Store) Resume(ctx context.Context, id string) (Epoch, error) { return s.Start(ctx, id) }

// Replan supersedes the running plan (a model switch): it revokes the current
// executor's lease, so every later write of the old epoch is refused, then
// makes the caller the executor of plan p at a new epoch.
func (s *Store) Replan(ctx context.Context, id string, p Plan) (Epoch, error) {
	if err := validateID(id); err != nil {
		return Epoch{}, err
	}
	if _, err := s.fs.Revoke(ctx, leaseName(id)); err != nil && !errors.Is(err, fence.ErrNotFound) {
		return Epoch{}, err
	}
	l, err := s.fs.Acquire(ctx, leaseName(id), s.ttl)
	if err != nil {
		return Epoch{}, err
	}
	e := Epoch{Task: id, Token: l.Token}
	f := e.Number()
	if _, err := s.fs.Exec(ctx, e.Token, s.q["replan"], f, p.Model, p.Text, id, f); err != nil {
		_ = s.fs.Release(context.WithoutCancel(ctx), e.Token)
		return Epoch{}, s.explain(ctx, id, err)
	}
	return e, nil
}

// Cancel stops the task: it revokes the executor's lease (its later writes
// are refused) and marks the task cancelled at the revocation's epoch, which
// it returns. A cancelled task can be resumed with Resume.
func (s *Store) Cancel(ctx context.Context, id string) (int64, error) {
	if err := validateID(id); err != nil {
		return 0, err
	}
	f, err := s.fs.Revoke(ctx, leaseName(id))
	if errors.Is(err, fence.ErrNotFound) {
		// Never started: take and revoke the lease so the epoch still moves.
		if _, aerr := s.fs.Acquire(ctx, leaseName(id), s.ttl); aerr != nil {
			return 0, aerr
		}
		f, err = s.fs.Revoke(ctx, leaseName(id))
	}
	if err != nil {
		return 0, err
	}
	n, err := s.exec(ctx, s.q["cancel"], f, id, f)
	if err != nil {
		return 0, fmt.Errorf("task: cancel %q: %w", id, err)
	}
	if n == 0 {
		return f, s.explain(ctx, id, fence.ErrNoMatch)
	}
	return f, nil
}

// RecordStep stores the result of step key (a tool call) for e's epoch. It
// returns false, nil when this epoch already recorded that step (a retried
// step is stored once), and an error wrapping fence.ErrLost and
// ErrStaleEpoch when e is no longer the task's current epoch.
func (s *Store) RecordStep(ctx context.Context, e Epoch, key string, result any) (bool, error) {
	if key == "" || len(key) > fence.MaxNameLen {
		return false, fmt.Errorf("%w: step key must be 1 to %d bytes", fence.ErrInvalid, fence.MaxNameLen)
	}
	js, err := text(result)
	if err != nil {
		return false, err
	}
	f := e.Number()
	_, err = s.fs.Exec(ctx, e.Token, s.q["record_step"], key, js, e.Task, f, e.Task, f, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fence.ErrNoMatch):
		// The lease is still ours: the step exists already, or the task is
		// no longer running at this epoch.
		t, gerr := s.Get(ctx, e.Task)
		if gerr == nil && t.Epoch == f && t.State == Running {
			return false, nil
		}
		return false, s.stale(e, t, gerr)
	default:
		return false, s.wrap(e, err)
	}
}

// Checkpoint updates the running task's summary (progress) at e's epoch.
func (s *Store) Checkpoint(ctx context.Context, e Epoch, summary any) error {
	js, err := text(summary)
	if err != nil {
		return err
	}
	_, err = s.fs.Exec(ctx, e.Token, s.q["checkpoint"], js, e.Task, e.Number())
	return s.writeErr(ctx, e, err)
}

// Complete writes the final summary and marks the task succeeded, only if e
// is still the current epoch. An old epoch's completion changes nothing.
func (s *Store) Complete(ctx context.Context, e Epoch, summary any) error {
	js, err := text(summary)
	if err != nil {
		return err
	}
	_, err = s.fs.Exec(ctx, e.Token, s.q["finish"], string(Succeeded), js, "", e.Task, e.Number())
	return s.writeErr(ctx, e, err)
}

// Fail marks the task failed with reason, only if e is still current.
func (s *Store) Fail(ctx context.Context, e Epoch, reason string) error {
	_, err := s.fs.Exec(ctx, e.Token, s.q["finish"], string(Failed), "", reason, e.Task, e.Number())
	return s.writeErr(ctx, e, err)
}

// Renew extends the executor's lease.
func (s *Store) Renew(ctx context.Context, e Epoch) error {
	_, err := s.fs.Renew(ctx, e.Token, s.ttl)
	return s.wrap(e, err)
}

// Release gives up the executor's lease without finishing the task, so
// another executor can Resume it at once.
func (s *Store) Release(ctx context.Context, e Epoch) error {
	return s.wrap(e, s.fs.Release(ctx, e.Token))
}

// Execute starts (or resumes) task id and runs fn as its executor under the
// core runner: the lease is renewed while fn runs, fn's context is cancelled
// when the epoch is superseded or the lease can no longer be proven, and the
// lease is released at the end. fn finishes the task itself with Complete
// or Fail; its writes must use the Epoch it is given.
func (s *Store) Execute(ctx context.Context, id string, fn func(ctx context.Context, e Epoch) error, opts ...fence.RunOption) (fence.Result, error) {
	start := time.Now()
	e, err := s.Start(ctx, id)
	if err != nil {
		return fence.Result{Outcome: fence.NotAcquired, Err: err}, err
	}
	return fence.RunHeld(ctx, s.fs, fence.Lease{Token: e.Token, TTL: s.ttl}, start, func(ctx context.Context) error {
		return fn(ctx, e)
	}, opts...)
}

// Get reads a task.
func (s *Store) Get(ctx context.Context, id string) (Task, error) {
	var t Task
	var created, updated int64
	err := s.queryRow(ctx, s.q["get"], id).Scan(&t.ID, &t.Epoch, &t.State, &t.Plan.Model, &t.Plan.Text, &t.Summary, &t.Error, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, fmt.Errorf("%w: task %q", fence.ErrNotFound, id)
	}
	if err != nil {
		return Task{}, fmt.Errorf("task: get %q: %w", id, err)
	}
	t.CreatedAt, t.UpdatedAt = time.UnixMilli(created), time.UnixMilli(updated)
	return t, nil
}

// Steps lists a task's recorded steps of every epoch, oldest first.
func (s *Store) Steps(ctx context.Context, id string) ([]Step, error) {
	rows, closeRows, err := s.query(ctx, s.q["steps"], id)
	if err != nil {
		return nil, fmt.Errorf("task: steps of %q: %w", id, err)
	}
	defer closeRows()
	var out []Step
	for rows.Next() {
		var st Step
		var created int64
		if err := rows.Scan(&st.Task, &st.Epoch, &st.Key, &st.Result, &created); err != nil {
			return nil, err
		}
		st.CreatedAt = time.UnixMilli(created)
		out = append(out, st)
	}
	return out, rows.Err()
}

// StaleError is a write refused because its epoch is no longer current.
type StaleError struct {
	Task    string
	Epoch   int64
	Current int64 // the task's epoch now, when known
	State   State // the task's state now, when known
	Cause   error // the core store's refusal, when it refused
}

func (e *StaleError) Error() string {
	msg := fmt.Sprintf("task: %q epoch %d is stale", e.Task, e.Epoch)
	if e.Current != 0 {
		msg += fmt.Sprintf(" (task is at epoch %d, %s)", e.Current, e.State)
	}
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Is makes errors.Is true for ErrStaleEpoch and fence.ErrLost.
func (e *StaleError) Is(target error) bool { return target == ErrStaleEpoch || target == fence.ErrLost }
func (e *StaleError) Unwrap() error        { return e.Cause }

func (s *Store) stale(e Epoch, t Task, gerr error) error {
	se := &StaleError{Task: e.Task, Epoch: e.Number()}
	if gerr == nil {
		se.Current, se.State = t.Epoch, t.State
	}
	return se
}

// wrap turns the core store's ErrLost into a StaleError.
func (s *Store) wrap(e Epoch, err error) error {
	if err != nil && errors.Is(err, fence.ErrLost) {
		return &StaleError{Task: e.Task, Epoch: e.Number(), Cause: err}
	}
	return err
}

func (s *Store) writeErr(ctx context.Context, e Epoch, err error) error {
	if errors.Is(err, fence.ErrNoMatch) {
		t, gerr := s.Get(ctx, e.Task)
		if gerr == nil && (t.State == Succeeded || t.State == Failed || t.State == Cancelled) && t.Epoch == e.Number() {
			return fmt.Errorf("%w: %q is %s", ErrFinished, e.Task, t.State)
		}
		return s.stale(e, t, gerr)
	}
	return s.wrap(e, err)
}

// explain turns a refused claim into an error that says why.
func (s *Store) explain(ctx context.Context, id string, err error) error {
	if !errors.Is(err, fence.ErrNoMatch) {
		return err
	}
	t, gerr := s.Get(ctx, id)
	switch {
	case gerr != nil:
		return gerr
	case t.State == Succeeded || t.State == Failed || t.State == Cancelled:
		return fmt.Errorf("%w: %q is %s", ErrFinished, id, t.State)
	default:
		return fmt.Errorf("task: %q could not be claimed (epoch %d, %s): %w", id, t.Epoch, t.State, err)
	}
}

func text(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	case json.RawMessage:
		return string(v), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%w: %v", fence.ErrInvalid, err)
	}
	return string(b), nil
}
