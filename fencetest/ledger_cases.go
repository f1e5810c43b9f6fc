package fencetest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/task"
)

// The effect ledger (package task, schema version 6): each step's effect at
// most once per task, across epochs; the fence a precondition of every
// write of the ledger.
func ledgerCases() []suiteCase {
	return []suiteCase{
		{"LedgerNewerEpochGetsStoredResult", ledgerReplay},
		{"LedgerOlderEpochRefused", ledgerOlderRefused},
		{"LedgerDiedBetweenEffectAndRecordGoesToReconcile", ledgerDied},
		{"LedgerSupersededDuringEffectLeavesDoubt", ledgerSuperseded},
		{"LedgerSameKeyOtherPayloadIsError", ledgerPayload},
		{"LedgerInFlightInOneEpoch", ledgerInFlight},
		{"LedgerInDoubtAfterInOneEpoch", ledgerInDoubtAfter},
		{"LedgerNotAppliedRunsAgainOtherErrorsDoubt", ledgerFailures},
		{"LedgerToolIgnoringCancelRefusedAtCommit", ledgerCancel},
		{"CheckpointBySupersededOwnerRefused", checkpointSuperseded},
		{"IdempotencyKeySameAcrossEpochs", idempotencyAcrossEpochs},
	}
}

func newLedger(t *testing.T, b Backend, opts ...task.LedgerOption) (*task.Store, *task.Ledger) {
	t.Helper()
	ts, err := task.New(b.Open(t, prefix()), task.WithTTL(long))
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.NewLedger(ts, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ts, l
}

func startTask(t *testing.T, ts *task.Store, id string) task.Epoch {
	t.Helper()
	ctx := ctxT(t)
	if err := ts.Create(ctx, id, task.Plan{Model: "m"}); err != nil {
		t.Fatal(err)
	}
	e, err := ts.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func replan(t *testing.T, ts *task.Store, id string) task.Epoch {
	t.Helper()
	e, err := ts.Replan(ctxT(t), id, task.Plan{Model: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// counter is an effect that counts how often it ran.
type counter struct{ n atomic.Int64 }

func (c *counter) fn(result string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		c.n.Add(1)
		return []byte(result), nil
	}
}

func wantStaleEpoch(t *testing.T, err error) {
	t.Helper()
	var se *task.StaleError
	if !errors.Is(err, task.ErrStaleEpoch) || !errors.Is(err, fence.ErrLost) || !errors.As(err, &se) {
		t.Fatalf("want a stale-epoch error, got %v", err)
	}
}

// ledgerReplay: epoch N commits a step; epoch N+1 retrying it gets N's
// result back and the effect does not run again.
func ledgerReplay(t *testing.T, b Backend) {
	ts, l := newLedger(t, b)
	c := ctxT(t)
	e1 := startTask(t, ts, "t")
	var charge counter
	got, err := l.Do(c, e1, "charge", []byte(`{"cents":500}`), charge.fn("receipt-1"))
	if err != nil || string(got.Result) != "receipt-1" || got.Replayed || got.Epoch != e1.Number() {
		t.Fatalf("first Do = %+v, %v", got, err)
	}
	// A retry in the same epoch is a replay too.
	if got, err := l.Do(c, e1, "charge", []byte(`{"cents":500}`), charge.fn("receipt-2")); err != nil || !got.Replayed || string(got.Result) != "receipt-1" {
		t.Fatalf("retry in epoch %d = %+v, %v", e1.Number(), got, err)
	}
	e2 := replan(t, ts, "t")
	got, err = l.Do(c, e2, "charge", []byte(`{"cents":500}`), charge.fn("receipt-3"))
	if err != nil || !got.Replayed || string(got.Result) != "receipt-1" || got.Epoch != e1.Number() {
		t.Fatalf("retry in epoch %d = %+v, %v; want epoch %d's result replayed", e2.Number(), got, err, e1.Number())
	}
	if n := charge.n.Load(); n != 1 {
		t.Fatalf("the effect ran %d times, want 1", n)
	}
	// An empty result is stored as empty and replayed as such.
	if got, err := l.Do(c, e2, "noop", nil, func(context.Context) ([]byte, error) { return nil, nil }); err != nil || len(got.Result) != 0 {
		t.Fatalf("empty result: %+v, %v", got, err)
	}
	rec, err := l.Get(c, "t", "noop")
	if err != nil || rec.State != task.Committed || rec.Epoch != e2.Number() || len(rec.Result) != 0 {
		t.Fatalf("record of noop: %+v, %v", rec, err)
	}
	if _, err := l.Get(c, "t", "absent"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get of an unclaimed step: %v", err)
	}
}

// ledgerOlderRefused: an older epoch is refused before its effect runs,
// for a step a newer epoch committed and for a step nobody claimed.
func ledgerOlderRefused(t *testing.T, b Backend) {
	ts, l := newLedger(t, b)
	c := ctxT(t)
	e1 := startTask(t, ts, "t")
	e2 := replan(t, ts, "t")
	var eff counter
	if _, err := l.Do(c, e2, "send", []byte("p"), eff.fn("sent")); err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"send", "other"} {
		_, err := l.Do(c, e1, step, []byte("p"), eff.fn("late"))
		wantStaleEpoch(t, err)
	}
	if n := eff.n.Load(); n != 1 {
		t.Fatalf("the effect ran %d times, want 1 (the older epoch's must not run)", n)
	}
	if _, err := l.Get(c, "t", "other"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("the refused epoch left a claim: %v", err)
	}
}

// ledgerDied: the process dies between the effect and its record (a panic
// here, which Do does not recover: nothing records the outcome). The next
// epoch finds the step in doubt: without a hook that is an error, and the
// hook decides whether the effect runs again.
func ledgerDied(t *testing.T, b Backend) {
	ts, _ := newLedger(t, b)
	c := ctxT(t)
	e1 := startTask(t, ts, "t")
	var eff counter
	die := func(l *task.Ledger, step string) {
		defer func() {
			if recover() == nil {
				t.Fatal("the effect did not die")
			}
		}()
		l.Do(c, e1, step, []byte("p"), func(ctx context.Context) ([]byte, error) {
			eff.n.Add(1)
			panic("killed between effect and record")
		})
	}
	bare, err := task.NewLedger(ts)
	if err != nil {
		t.Fatal(err)
	}
	die(bare, "applied")
	die(bare, "lost")
	e2 := replan(t, ts, "t")
	_, err = bare.Do(c, e2, "applied", []byte("p"), eff.fn("again"))
	var de *task.DoubtError
	if !errors.Is(err, task.ErrInDoubt) || !errors.As(err, &de) || de.Doubt.Epoch != e1.Number() || de.Doubt.State != task.Claimed {
		t.Fatalf("without a reconcile hook: %v; want a DoubtError for epoch %d's claim", err, e1.Number())
	}
	var asked []string
	l, err := task.NewLedger(ts, task.WithReconcile(func(ctx context.Context, d task.Doubt) (task.Resolution, error) {
		asked = append(asked, fmt.Sprintf("%s@%d by %d", d.Step, d.Epoch, d.Current.Number()))
		if d.Step == "applied" {
			return task.Resolution{Applied: true, Result: []byte("found")}, nil
		}
		return task.Resolution{}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Do(c, e2, "applied", []byte("p"), eff.fn("again"))
	if err != nil || !got.Reconciled || string(got.Result) != "found" || got.Epoch != e2.Number() {
		t.Fatalf("reconciled as applied: %+v, %v", got, err)
	}
	got, err = l.Do(c, e2, "lost", []byte("p"), eff.fn("redone"))
	if err != nil || got.Reconciled || got.Replayed || string(got.Result) != "redone" {
		t.Fatalf("reconciled as not applied: %+v, %v", got, err)
	}
	if n := eff.n.Load(); n != 3 {
		t.Fatalf("the effect ran %d times, want 3 (two deaths, one redo)", n)
	}
	// Both are committed now: a later epoch replays them without asking.
	e3 := replan(t, ts, "t")
	for step, want := range map[string]string{"applied": "found", "lost": "redone"} {
		got, err := l.Do(c, e3, step, []byte("p"), eff.fn("never"))
		if err != nil || !got.Replayed || string(got.Result) != want {
			t.Fatalf("%s in epoch %d: %+v, %v", step, e3.Number(), got, err)
		}
	}
	if len(asked) != 2 {
		t.Fatalf("reconcile hook asked %v, want once per doubtful step", asked)
	}
}

// ledgerSuperseded: a zombie's effect finishes after a replan; its record is
// refused and the step is in doubt for the new epoch, which asks the hook.
func ledgerSuperseded(t *testing.T, b Backend) {
	var asked atomic.Int64
	ts, l := newLedger(t, b, task.WithReconcile(func(ctx context.Context, d task.Doubt) (task.Resolution, error) {
		asked.Add(1)
		return task.Resolution{Applied: true, Result: []byte("zombie's")}, nil
	}))
	c := ctxT(t)
	e1 := startTask(t, ts, "t")
	var e2 task.Epoch
	_, err := l.Do(c, e1, "write", []byte("p"), func(ctx context.Context) ([]byte, error) {
		e2 = replan(t, ts, "t") // the takeover lands while the effect runs
		return []byte("zombie's"), nil
	})
	wantStaleEpoch(t, err)
	rec, err := l.Get(c, "t", "write")
	if err != nil || rec.State != task.Claimed || rec.Epoch != e1.Number() {
		t.Fatalf("after the refused record: %+v, %v; want epoch %d's claim", rec, err, e1.Number())
	}
	got, err := l.Do(c, e2, "write", []byte("p"), func(context.Context) ([]byte, error) {
		t.Error("the effect ran again although the hook found it applied")
		return nil, nil
	})
	if err != nil || !got.Reconciled || asked.Load() != 1 {
		t.Fatalf("new epoch: %+v, %v (hook asked %d times)", got, err, asked.Load())
	}
}

// ledgerPayload: one key, another payload: an error in every epoch, and the
// effect does not run.
func ledgerPayload(t *testing.T, b Backend) {
	ts, l := newLedger(t, b)
	c := ctxT(t)
	e1 := startTask(t, ts, "t")
	var eff counter
	if _, err := l.Do(c, e1, "pay", []byte(`{"to":"a"}`), eff.fn("ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Do(c, e1, "pay", []byte(`{"to":"b"}`), eff.fn("ok")); !errors.Is(err, task.ErrPayloadMismatch) {
		t.Fatalf("same epoch, other payload: %v", err)
	}
	e2 := replan(t, ts, "t")
	if _, err := l.Do(c, e2, "pay", []byte(`{"to":"b"}`), eff.fn("ok")); !errors.Is(err, task.ErrPayloadMismatch) {
		t.Fatalf("newer epoch, other payload: %v", err)
	}
	if n := eff.n.Load(); n != 1 {
		t.Fatalf("the effect ran %d times, want 1", n)
	}
}

// ledgerInFlight: while an attempt of this epoch acts, a second attempt of
// the same step is told it is in flight (retry later), not run.
func ledgerInFlight(t *testing.T, b Backend) {
	ts, l := newLedger(t, b)
	c := ctxT(t)
	e1 := startTask(t, ts, "t")
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := l.Do(c, e1, "slow", []byte("p"), func(ctx context.Context) ([]byte, error) {
			close(inside)
			<-release
			return []byte("r"), nil
		})
		done <- err
	}()
	<-inside
	_, err := l.Do(c, e1, "slow", []byte("p"), func(context.Context) ([]byte, error) {
		t.Error("a second attempt ran while the first was in flight")
		return nil, nil
	})
	close(release)
	if !errors.Is(err, task.ErrInFlight) {
		t.Fatalf("second attempt: %v; want ErrInFlight", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, err := l.Do(c, e1, "slow", []byte("p"), nil); err == nil || !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("nil effect: %+v, %v", got, err)
	}
	if got, err := l.Do(c, e1, "slow", []byte("p"), (&counter{}).fn("x")); err != nil || !got.Replayed || string(got.Result) != "r" {
		t.Fatalf("after the first attempt: %+v, %v", got, err)
	}
}

// ledgerFailures: an effect that says it did not happen (NotApplied) runs
// again on retry; any other failure leaves the step in doubt, and the retry
// goes to the hook even in the same epoch.
func ledgerFailures(t *testing.T, b Backend) {
	var asked atomic.Int64
	ts, l := newLedger(t, b, task.WithReconcile(func(ctx context.Context, d task.Doubt) (task.Resolution, error) {
		asked.Add(1)
		if d.State != task.Doubtful {
			return task.Resolution{}, fmt.Errorf("state %s, want doubt", d.State)
		}
		return task.Resolution{}, nil
	}))
	c := ctxT(t)
	e1 := startTask(t, ts, "t")
	refused := errors.New("refused before sending")
	if _, err := l.Do(c, e1, "a", nil, func(context.Context) ([]byte, error) { return nil, task.NotApplied(refused) }); !errors.Is(err, refused) || !errors.Is(err, task.ErrNotApplied) {
		t.Fatalf("NotApplied: %v", err)
	}
	if _, err := l.Get(c, "t", "a"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("a NotApplied effect left its claim: %v", err)
	}
	var eff counter
	if got, err := l.Do(c, e1, "a", nil, eff.fn("ok")); err != nil || got.Replayed || eff.n.Load() != 1 {
		t.Fatalf("retry after NotApplied: %+v, %v", got, err)
	}
	timeout := errors.New("timeout: the call may have landed")
	if _, err := l.Do(c, e1, "b", nil, func(context.Context) ([]byte, error) { return nil, timeout }); !errors.Is(err, timeout) {
		t.Fatalf("failure: %v", err)
	}
	if rec, err := l.Get(c, "t", "b"); err != nil || rec.State != task.Doubtful {
		t.Fatalf("after a failure that may have landed: %+v, %v", rec, err)
	}
	if got, err := l.Do(c, e1, "b", nil, eff.fn("ok")); err != nil || asked.Load() != 1 || eff.n.Load() != 2 || got.Replayed {
		t.Fatalf("retry in the same epoch: %+v, %v (hook asked %d)", got, err, asked.Load())
	}
}

// ledgerCancel: Cancel raises the epoch, so a tool that ignored the cancel
// and finished its effect is refused when it records it, and the cancelled
// task's later steps are refused before they act.
func ledgerCancel(t *testing.T, b Backend) {
	ts, l := newLedger(t, b)
	c := ctxT(t)
	e1 := startTask(t, ts, "t")
	var cancelled int64
	_, err := l.Do(c, e1, "tool", []byte("p"), func(ctx context.Context) ([]byte, error) {
		f, err := ts.Cancel(context.WithoutCancel(ctx), "t")
		if err != nil {
			return nil, task.NotApplied(err)
		}
		cancelled = f
		return []byte("done anyway"), nil // ignores the cancel
	})
	wantStaleEpoch(t, err)
	if cancelled <= e1.Number() {
		t.Fatalf("Cancel returned epoch %d, not above %d", cancelled, e1.Number())
	}
	if rec, err := l.Get(c, "t", "tool"); err != nil || rec.State == task.Committed {
		t.Fatalf("the ignored cancel's result was committed: %+v, %v", rec, err)
	}
	_, err = l.Do(c, e1, "next", []byte("p"), (&counter{}).fn("x"))
	wantStaleEpoch(t, err)
}

// checkpointSuperseded: an owner whose lease lapsed (frozen, then thawed)
// and was taken over cannot write a checkpoint: the contract langgraph
// #8796 asks for.
func checkpointSuperseded(t *testing.T, b Backend) {
	fs := b.Open(t, prefix())
	c := ctxT(t)
	ts, err := task.New(fs, task.WithTTL(long))
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Create(c, "t", task.Plan{}); err != nil {
		t.Fatal(err)
	}
	frozen, err := ts.Start(c, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Checkpoint(c, frozen, "step 1"); err != nil {
		t.Fatal(err)
	}
	// The owner freezes: its last renewal was the shortest TTL, which the
	// database clock passes while it is stopped.
	if _, err := fs.Renew(c, frozen.Token, fence.MinTTL); err != nil {
		t.Fatal(err)
	}
	var next task.Epoch
	for { // until the frozen owner's lease lapsed by the database clock
		next, err = ts.Resume(c, "t")
		if err == nil {
			break
		}
		if !errors.Is(err, fence.ErrHeld) || c.Err() != nil {
			t.Fatal(err)
		}
	}
	if err := ts.Checkpoint(c, next, "step 2 (new owner)"); err != nil {
		t.Fatal(err)
	}
	wantStaleEpoch(t, ts.Checkpoint(c, frozen, "step 2 (thawed)"))
	if got, err := ts.Get(c, "t"); err != nil || got.Summary != "step 2 (new owner)" || got.Epoch != next.Number() {
		t.Fatalf("task after the thawed checkpoint: %+v, %v", got, err)
	}
}

// idempotencyAcrossEpochs: the key sent downstream for a step is the same
// in every epoch (before issue 30 it contained the fence, so a newer epoch
// retrying a step sent a new key and the downstream acted twice).
func idempotencyAcrossEpochs(t *testing.T, b Backend) {
	ts, _ := newLedger(t, b)
	e1 := startTask(t, ts, "t")
	e2 := replan(t, ts, "t")
	if e1.IdempotencyKey("s") != e2.IdempotencyKey("s") {
		t.Fatalf("epochs %d and %d send different keys for one step", e1.Number(), e2.Number())
	}
	if e1.IdempotencyKey("s") == e1.IdempotencyKey("s2") {
		t.Fatal("two steps share a key")
	}
}

// ledgerInDoubtAfter: with WithInDoubtAfter, a claim of the current epoch
// whose attempt died (a server that acts for a client keeping its epoch)
// goes to the hook once it is older than the bound by the database clock,
// instead of staying in flight for the whole epoch.
func ledgerInDoubtAfter(t *testing.T, b Backend) {
	var asked atomic.Int64
	ts, l := newLedger(t, b, task.WithInDoubtAfter(20*time.Millisecond), task.WithReconcile(func(ctx context.Context, d task.Doubt) (task.Resolution, error) {
		asked.Add(1)
		return task.Resolution{}, nil // not applied: run it
	}))
	c := ctxT(t)
	e1 := startTask(t, ts, "t")
	func() {
		defer func() { recover() }()
		l.Do(c, e1, "s", nil, func(context.Context) ([]byte, error) { panic("attempt died") })
	}()
	var eff counter
	for {
		got, err := l.Do(c, e1, "s", nil, eff.fn("done"))
		if errors.Is(err, task.ErrInFlight) && c.Err() == nil {
			continue // until the claim is older than the bound
		}
		if err != nil || string(got.Result) != "done" || asked.Load() != 1 || eff.n.Load() != 1 {
			t.Fatalf("after the bound: %+v, %v (hook asked %d, effect ran %d)", got, err, asked.Load(), eff.n.Load())
		}
		break
	}
	if _, err := task.NewLedger(ts, task.WithInDoubtAfter(-time.Second)); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("negative bound: %v", err)
	}
}
