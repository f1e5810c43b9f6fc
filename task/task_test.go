package task_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/task"
)

func open(t *testing.T, b teststore.Backend) *task.Store {
	ts, err := task.New(b.Open(t), task.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func wantStale(t *testing.T, err error) {
	t.Helper()
	var se *task.StaleError
	if !errors.Is(err, task.ErrStaleEpoch) || !errors.Is(err, fence.ErrLost) || !errors.As(err, &se) {
		t.Fatalf("want a stale-epoch error, got %v", err)
	}
}

func TestEpochLifecycle(t *testing.T) {
	teststore.EachOf(t, teststore.WithPgx(), func(t *testing.T, b teststore.Backend) {
		ts := open(t, b)
		ctx := context.Background()
		if err := ts.Create(ctx, "t1", task.Plan{Model: "m1", Text: "plan"}); err != nil {
			t.Fatal(err)
		}
		if err := ts.Create(ctx, "t1", task.Plan{}); !errors.Is(err, task.ErrExists) {
			t.Fatalf("create twice: %v", err)
		}
		e1, err := ts.Start(ctx, "t1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.Start(ctx, "t1"); !errors.Is(err, fence.ErrHeld) {
			t.Fatalf("second executor while the first is alive: %v", err)
		}
		// A retried step is stored once.
		for i, want := range []bool{true, false, false} {
			ok, err := ts.RecordStep(ctx, e1, "search", map[string]string{"q": "x"})
			if err != nil || ok != want {
				t.Fatalf("record #%d: %v %v", i, ok, err)
			}
		}
		if err := ts.Checkpoint(ctx, e1, "halfway"); err != nil {
			t.Fatal(err)
		}
		e2, err := ts.Replan(ctx, "t1", task.Plan{Model: "m2", Text: "plan 2"})
		if err != nil {
			t.Fatal(err)
		}
		if e2.Number() <= e1.Number() {
			t.Fatalf("epochs %d then %d", e1.Number(), e2.Number())
		}
		// Every write of the old epoch is refused and changes nothing.
		_, err = ts.RecordStep(ctx, e1, "read", "late")
		wantStale(t, err)
		wantStale(t, ts.Checkpoint(ctx, e1, "late"))
		wantStale(t, ts.Complete(ctx, e1, "old summary"))
		wantStale(t, ts.Fail(ctx, e1, "old failure"))
		got, err := ts.Get(ctx, "t1")
		if err != nil || got.State != task.Running || got.Epoch != e2.Number() || got.Summary != "halfway" || got.Plan.Model != "m2" {
			t.Fatalf("task after refused writes: %+v %v", got, err)
		}
		if err := ts.Complete(ctx, e2, "final"); err != nil {
			t.Fatal(err)
		}
		if err := ts.Complete(ctx, e2, "again"); !errors.Is(err, task.ErrFinished) {
			t.Fatalf("complete twice: %v", err)
		}
		if err := ts.Release(ctx, e2); err != nil {
			t.Fatal(err)
		}
		if _, err := ts.Start(ctx, "t1"); !errors.Is(err, task.ErrFinished) {
			t.Fatalf("start a finished task: %v", err)
		}
		steps, err := ts.Steps(ctx, "t1")
		if err != nil || len(steps) != 1 || steps[0].Epoch != e1.Number() || steps[0].Result != `{"q":"x"}` {
			t.Fatalf("steps %+v %v", steps, err)
		}
		final, _ := ts.Get(ctx, "t1")
		if final.State != task.Succeeded || final.Summary != "final" {
			t.Fatalf("final %+v", final)
		}
	})
}

func TestCancelThenResume(t *testing.T) {
	teststore.EachOf(t, teststore.WithPgx(), func(t *testing.T, b teststore.Backend) {
		ts := open(t, b)
		ctx := context.Background()
		if err := ts.Create(ctx, "t", task.Plan{}); err != nil {
			t.Fatal(err)
		}
		e1, err := ts.Start(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		c, err := ts.Cancel(ctx, "t")
		if err != nil || c <= e1.Number() {
			t.Fatalf("cancel: %d %v", c, err)
		}
		if got, _ := ts.Get(ctx, "t"); got.State != task.Cancelled || got.Epoch != c {
			t.Fatalf("after cancel: %+v", got)
		}
		wantStale(t, ts.Complete(ctx, e1, "late"))
		if _, err := ts.Cancel(ctx, "t"); !errors.Is(err, task.ErrFinished) {
			t.Fatalf("cancel twice: %v", err)
		}
		e2, err := ts.Resume(ctx, "t")
		if err != nil || e2.Number() <= c {
			t.Fatalf("resume: %+v %v", e2, err)
		}
		if err := ts.Complete(ctx, e2, "done"); err != nil {
			t.Fatal(err)
		}
		// A task that never started can be cancelled too.
		if err := ts.Create(ctx, "never", task.Plan{}); err != nil {
			t.Fatal(err)
		}
		if f, err := ts.Cancel(ctx, "never"); err != nil || f < 1 {
			t.Fatalf("cancel a pending task: %d %v", f, err)
		}
	})
}

func TestExecuteStopsWhenSuperseded(t *testing.T) {
	teststore.EachOf(t, teststore.WithPgx(), func(t *testing.T, b teststore.Backend) {
		fs := b.Open(t)
		// A one-minute TTL with renewals every 50 ms: the revoke is seen at
		// the next renewal, and a loaded machine cannot miss a 600 ms renew
		// deadline (TTL 900 ms) first, in this run or in the one that must
		// complete.
		ts, err := task.New(fs, task.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := ts.Create(ctx, "t", task.Plan{}); err != nil {
			t.Fatal(err)
		}
		res, err := ts.Execute(ctx, "t", func(ctx context.Context, e task.Epoch) error {
			// Not on the job's context: the runner's next renewal can see the
			// replan's revoke and cancel that context before its answer is read.
			if _, err := ts.Replan(context.WithoutCancel(ctx), "t", task.Plan{Model: "new"}); err != nil {
				return err
			}
			<-ctx.Done() // the runner notices the revoked lease at its next renewal
			return context.Cause(ctx)
		}, fence.WithRenewEvery(50*time.Millisecond), fence.WithCallTimeout(20*time.Second))
		if err != nil || res.Outcome != fence.Lost || !errors.Is(res.Err, fence.ErrLost) {
			t.Fatalf("%+v %v", res, err)
		}
		// Execute to completion.
		if err := ts.Create(ctx, "u", task.Plan{}); err != nil {
			t.Fatal(err)
		}
		res, err = ts.Execute(ctx, "u", func(ctx context.Context, e task.Epoch) error {
			if e.IdempotencyKey("s") == "" || e.IdempotencyKey("s") == e.IdempotencyKey("t") {
				t.Error("idempotency keys")
			}
			return ts.Complete(ctx, e, "ok")
		})
		if err != nil || res.Outcome != fence.Completed {
			t.Fatalf("%+v %v", res, err)
		}
		if got, _ := ts.Get(ctx, "u"); got.State != task.Succeeded {
			t.Fatalf("%+v", got)
		}
	})
}

func TestBadInput(t *testing.T) {
	ts := open(t, teststore.Backends[0])
	ctx := context.Background()
	for _, id := range []string{"", strings.Repeat("x", 190), "a\x00b"} {
		if err := ts.Create(ctx, id, task.Plan{}); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("create %q: %v", id, err)
		}
		if _, err := ts.Start(ctx, id); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("start %q: %v", id, err)
		}
	}
	if err := ts.Create(ctx, "ok", task.Plan{}); err != nil {
		t.Fatal(err)
	}
	e, err := ts.Start(ctx, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.RecordStep(ctx, e, "", nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("empty step key: %v", err)
	}
	if _, err := ts.Get(ctx, "absent"); !errors.Is(err, fence.ErrNotFound) {
		t.Errorf("get absent: %v", err)
	}
	if _, err := ts.Start(ctx, "absent"); err == nil {
		t.Error("start of an absent task succeeded")
	}
}
