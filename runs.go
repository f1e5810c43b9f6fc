package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// RunStatus is a run's status in the run ledger.
type RunStatus string

// Run statuses. A run is "running" until its owner finishes it with fenced
// completion (succeeded, failed), or it is found stale: "lost" (its own
// worker or a sweep saw that its lease generation ended) or "abandoned" (a
// newer owner of the same lease started a run).
const (
	RunRunning   RunStatus = driver.RunRunning
	RunSucceeded RunStatus = driver.RunSucceeded
	RunFailed    RunStatus = driver.RunFailed
	RunLost      RunStatus = driver.RunLost
	RunAbandoned RunStatus = driver.RunAbandoned
)

// RunInfo is a row of the run ledger.
type RunInfo struct {
	ID    int64
	Lease string
	Owner string
	// Holder is the name of the lease's owner when the run started
	// (WithHolder), "" for runs recorded before schema v3.
	Holder     string
	Fence      int64
	Status     RunStatus
	StartedAt  time.Time // database time
	FinishedAt time.Time // zero while running
	Result     json.RawMessage
	Error      string
	ExitCode   *int
}

// Duration is FinishedAt-StartedAt, or 0 while running.
func (r RunInfo) Duration() time.Duration {
	if r.FinishedAt.IsZero() {
		return 0
	}
	return r.FinishedAt.Sub(r.StartedAt)
}

func runInfo(r driver.Run) RunInfo {
	out := RunInfo{ID: r.ID, Lease: r.Lease, Owner: r.Owner, Holder: r.Holder, Fence: r.Fence, Status: RunStatus(r.Status),
		StartedAt: time.UnixMilli(r.StartedAtMs), Error: r.Error}
	if r.FinishedAtMs > 0 {
		out.FinishedAt = time.UnixMilli(r.FinishedAtMs)
	}
	if r.Result != "" {
		out.Result = json.RawMessage(r.Result)
	}
	if r.ExitCode != nil {
		c := int(*r.ExitCode)
		out.ExitCode = &c
	}
	return out
}

// StartRun records a running run for t, only if t holds its lease (else
// ErrLost), and marks older running runs of the same lease abandoned. detail,
// if not nil, is stored as JSON in the run's result until FinishRun replaces it.
func (s *Store) StartRun(ctx context.Context, t Token, detail any) (id int64, err error) {
	ctx, done := s.observe(ctx, OpStartRun, t.Lease)
	defer func() {
		e := Event{Fence: t.Fence, Err: err, Run: id}
		if err == nil {
			e.Status = RunRunning
		}
		done(e)
	}()
	if err := validateToken(t); err != nil {
		return 0, err
	}
	js, err := marshalResult(detail)
	if err != nil {
		return 0, err
	}
	if err := notSent(ctx, "start run", t.Lease); err != nil {
		return 0, err
	}
	id, ok, err := s.drv.RunStart(ctx, driver.StartRunParams{Token: tp(t), Detail: js})
	if err != nil {
		return 0, s.wrapWrite("start run", t.Lease, err)
	}
	if !ok {
		return 0, s.lost(ctx, t, "start run")
	}
	return id, nil
}

// Completion is how a run ended, for FinishRun (a run's completion; a
// Run's overall verdict is Result.Outcome, a RunOutcome).
type Completion struct {
	// Err is the job's error; nil means succeeded.
	Err error
	// Result is stored as JSON (json.RawMessage is stored as is).
	Result any
	// ExitCode, for runs of external commands.
	ExitCode *int
}

// FinishRun is the fenced completion of the article: one statement that
// marks run id succeeded or failed only if the run carries t's fence and t
// still holds its lease by the database clock. If not, nothing of the
// outcome is written, the run is marked lost (it is never left looking
// successful), and the error wraps ErrLost.
//
// It is idempotent: called again with the same outcome for a run that
// already has it (a retry after an answer was lost), it returns nil. When
// the connection fails before the answer, FinishRun reads the run (within
// ctx's deadline) and returns nil if the completion is there; only if the
// run cannot tell (it is still running, or cannot be read) is the error
// ErrAmbiguous. A run that ended otherwise gives ErrLost. A refused
// completion of a run that a newer generation's StartRun marked abandoned
// moves the run's end to now (once), with "; completion refused" added to
// its error: the ledger then shows how long the stale run overlapped its
// successor.
func (s *Store) FinishRun(ctx context.Context, t Token, id int64, o Completion) (err error) {
	ctx, done := s.observe(ctx, OpFinishRun, t.Lease)
	defer func() {
		e := Event{Fence: t.Fence, Err: err, Status: RunSucceeded, Run: id}
		switch {
		case errors.Is(err, ErrLost):
			e.Status = RunLost
		case err != nil:
			e.Status = ""
		case o.Err != nil:
			e.Status = RunFailed
		}
		done(e)
	}()
	if err := validateToken(t); err != nil {
		return err
	}
	js, err := marshalResult(o.Result)
	if err != nil {
		return err
	}
	p := driver.FinishRunParams{ID: id, Token: tp(t), Status: driver.RunSucceeded, Result: js}
	if o.Err != nil {
		p.Status = driver.RunFailed
		p.Error = o.Err.Error()
	}
	if o.ExitCode != nil {
		c := int64(*o.ExitCode)
		p.ExitCode = &c
	}
	if err := notSent(ctx, "finish run", t.Lease); err != nil {
		return err
	}
	ok, err := s.drv.RunFinish(ctx, p)
	if err != nil {
		werr := s.wrapWrite("finish run", t.Lease, err)
		if !errors.Is(werr, ErrAmbiguous) {
			return werr
		}
		return s.resolveFinish(ctx, t, p, werr)
	}
	if ok {
		return nil
	}
	rctx, cancel := followUp(ctx)
	defer cancel()
	r, found, gerr := s.drv.RunGet(rctx, id)
	switch {
	case gerr != nil:
	case !found:
		return fmt.Errorf("%w: run %d", ErrNotFound, id)
	case r.Fence != t.Fence || r.Lease != t.Lease:
		return fmt.Errorf("%w: run %d belongs to lease %q fence %d, not %s", ErrInvalid, id, r.Lease, r.Fence, t)
	case finishedAs(r, t, p):
		// Only a fenced completion by this token writes this outcome, so an
		// earlier call of ours was accepted.
		return nil
	case r.Status != driver.RunRunning:
		if r.Status == driver.RunAbandoned && r.Owner == t.Owner {
			// The run went on after its successor started; the ledger
			// keeps when it really ended, so the overlap shows.
			_, _ = s.drv.RunRefused(rctx, id, t.Fence, reportRefused)
		}
		le := s.lost(rctx, t, "finish run").(*LostError)
		return fmt.Errorf("%w (run %d is already %s)", le, id, r.Status)
	}
	lerr := s.lost(rctx, t, "finish run")
	_, _ = s.drv.RunMarkLost(rctx, id, t.Fence, "completion rejected: "+lerr.Error())
	return lerr
}

// The reports a stale worker adds to its abandoned run's error when it
// ends it late (see endedLate).
const (
	reportRefused = "completion refused"
	reportStopped = "stopped late: its worker found the lease lost"
)

// endedLate records the real end of run id of t after its worker found the
// lease lost, if a newer generation's run had abandoned it meanwhile: the
// run then still shows its successor's start as its end, and the overlap
// of the two would not show. A run still running is marked lost instead
// (its end is now, and no run of a newer fence began). Bounded by ctx; the
// ledger is what an operator reads, so a failure is only logged.
func (s *Store) endedLate(ctx context.Context, t Token, id int64, reason string, cause error) {
	if err := s.markRunLost(ctx, t.Lease, id, t.Fence, reason, cause); err != nil {
		s.log.WarnContext(ctx, "fence: marking the run lost failed", "lease", t.Lease, "run", id, "err", err)
		return
	}
	if _, err := s.drv.RunRefused(ctx, id, t.Fence, reportStopped); err != nil {
		s.log.WarnContext(ctx, "fence: recording the end of the abandoned run failed", "lease", t.Lease, "run", id, "err", err)
	}
}

// resolveFinish settles a completion whose answer was lost by reading the
// run: the outcome is there (it committed), or the run ended otherwise (it
// did not, and cannot now). A run still running says nothing: the statement
// may yet be on its way to the server.
func (s *Store) resolveFinish(ctx context.Context, t Token, p driver.FinishRunParams, werr error) error {
	rctx, cancel := followUp(ctx)
	defer cancel()
	r, found, gerr := s.drv.RunGet(rctx, p.ID)
	switch {
	case gerr != nil || !found || r.Status == driver.RunRunning:
		return werr
	case finishedAs(r, t, p):
		s.log.InfoContext(ctx, "fence: completion outcome resolved: committed", "lease", t.Lease, "run", p.ID)
		return nil
	}
	le := s.lost(rctx, t, "finish run").(*LostError)
	return fmt.Errorf("%w (run %d is already %s)", le, p.ID, r.Status)
}

// finishedAs reports whether run r already carries the completion p by t.
func finishedAs(r driver.Run, t Token, p driver.FinishRunParams) bool {
	if r.Lease != t.Lease || r.Owner != t.Owner || r.Fence != t.Fence || r.Status != p.Status || r.Error != p.Error {
		return false
	}
	if p.Result != "" && r.Result != p.Result {
		return false
	}
	if (r.ExitCode == nil) != (p.ExitCode == nil) || r.ExitCode != nil && *r.ExitCode != *p.ExitCode {
		return false
	}
	return true
}

// MarkRunLost marks a still-running run of fence lost with a reason; a stale
// worker uses it on its own run. It is not fenced: it can only move a run out
// of "running", never to success.
//
// Observers see it as OpMarkRunLost, with status RunLost if it marked the
// run. To name the run's lease to them, a store with observers reads the run
// first (lease "" if that read fails).
func (s *Store) MarkRunLost(ctx context.Context, id, fence int64, reason string) (err error) {
	return s.markRunLost(ctx, s.runLease(ctx, id), id, fence, reason, nil)
}

// markRunLost is MarkRunLost of a run of lease; cause, when not nil, is why
// a runner stopped the run's job, for observers (Event.Cause).
func (s *Store) markRunLost(ctx context.Context, lease string, id, fence int64, reason string, cause error) (err error) {
	var marked bool
	ctx, done := s.observe(ctx, OpMarkRunLost, lease)
	defer func() {
		e := Event{Fence: fence, Err: err, Run: id, Cause: cause}
		if marked {
			e.Status = RunLost
		}
		done(e)
	}()
	if err := notSent(ctx, "mark run lost", ""); err != nil {
		return err
	}
	marked, err = s.drv.RunMarkLost(ctx, id, fence, reason)
	if err != nil {
		return s.wrapWrite("mark run lost", "", err)
	}
	return nil
}

// runLease is the lease of run id for observers: "" without observers or if
// the run cannot be read.
func (s *Store) runLease(ctx context.Context, id int64) string {
	if len(s.observers) == 0 {
		return ""
	}
	r, ok, err := s.drv.RunGet(ctx, id)
	if err != nil || !ok {
		return ""
	}
	return r.Lease
}

// SweepRuns marks lost every running run whose lease generation is no longer
// valid (its worker died or was superseded without noticing) and returns how
// many it marked.
func (s *Store) SweepRuns(ctx context.Context) (int64, error) {
	if err := notSent(ctx, "sweep runs", ""); err != nil {
		return 0, err
	}
	n, err := s.drv.RunSweep(ctx)
	if err != nil {
		return 0, s.wrapWrite("sweep runs", "", err)
	}
	return n, nil
}

// GetRun returns one run, or an error wrapping ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id int64) (RunInfo, error) {
	r, ok, err := s.drv.RunGet(ctx, id)
	if err != nil {
		return RunInfo{}, s.wrap("get run", "", err)
	}
	if !ok {
		return RunInfo{}, fmt.Errorf("%w: run %d", ErrNotFound, id)
	}
	return runInfo(r), nil
}

// RunFilter selects runs; zero fields match everything.
type RunFilter struct {
	Lease  string
	Status RunStatus
	Limit  int // 0: no limit
	// Before keeps only runs whose ID is below it (0: no bound). Run IDs
	// grow with each start, so the last ID of one page is the cursor of the
	// next: Runs(ctx, RunFilter{Limit: 50, Before: page[49].ID}).
	Before int64
}

// Runs lists runs newest first.
func (s *Store) Runs(ctx context.Context, f RunFilter) ([]RunInfo, error) {
	if f.Lease != "" {
		if err := ValidateName(f.Lease); err != nil {
			return nil, err
		}
	}
	switch f.Status {
	case "", RunRunning, RunSucceeded, RunFailed, RunLost, RunAbandoned:
	default:
		return nil, fmt.Errorf("%w: run status %q (want running, succeeded, failed, lost or abandoned)", ErrInvalid, clip(string(f.Status)))
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("%w: negative limit %d", ErrInvalid, f.Limit)
	}
	if f.Before < 0 {
		return nil, fmt.Errorf("%w: negative run ID %d as a cursor", ErrInvalid, f.Before)
	}
	rs, err := s.drv.RunList(ctx, driver.RunFilter{Lease: f.Lease, Status: string(f.Status), Limit: f.Limit, Before: f.Before})
	if err != nil {
		return nil, s.wrap("list runs", "", err)
	}
	out := make([]RunInfo, len(rs))
	for i, r := range rs {
		out[i] = runInfo(r)
	}
	return out, nil
}

func marshalResult(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case json.RawMessage:
		if !json.Valid(v) {
			return "", fmt.Errorf("%w: run result is not valid JSON", ErrInvalid)
		}
		return string(v), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%w: run result: %v", ErrInvalid, err)
	}
	return string(b), nil
}
