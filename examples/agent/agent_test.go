package main

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

const ttl = 800 * time.Millisecond

func forEach(t *testing.T, fn func(t *testing.T, ts *task.Store)) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		ts, err := task.New(b.Open(t), task.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		fn(t, ts)
	})
}

// stepsOnce checks that every plan step is stored exactly once.
func stepsOnce(t *testing.T, out scenarioOutcome) {
	t.Helper()
	seen := map[string]int{}
	for _, s := range out.steps {
		seen[s.Key]++
	}
	for _, s := range steps {
		if seen[s] != 1 {
			t.Fatalf("step %q stored %d times: %+v", s, seen[s], out.steps)
		}
	}
}

func TestModelSwitch(t *testing.T) {
	forEach(t, func(t *testing.T, ts *task.Store) {
		tl := newTimeline(false)
		out, err := modelSwitch(context.Background(), ts, "switch", tl)
		if err != nil {
			t.Fatal(err)
		}
		defer logTimeline(t, tl)
		if !errors.Is(out.old.completeErr, fence.ErrLost) || !errors.Is(out.old.completeErr, task.ErrStaleEpoch) {
			t.Fatalf("v1's final summary: %v", out.old.completeErr)
		}
		if len(out.old.refused) == 0 {
			t.Fatal("v1 recorded no late tool result: the scenario did not race")
		}
		if out.cur.completeErr != nil || out.task.State != task.Succeeded || !strings.HasPrefix(out.task.Summary, "summary by large-v2") {
			t.Fatalf("v2: %v, task %+v", out.cur.completeErr, out.task)
		}
		if out.task.Plan.Model != "large-v2" {
			t.Fatalf("plan %+v", out.task.Plan)
		}
		for _, s := range out.steps {
			for _, r := range out.old.refused {
				if s.Key == r && strings.HasPrefix(s.Result, "small-v1") {
					t.Fatalf("refused v1 result %q stored", r)
				}
			}
		}
		stepsOnce(t, out)
	})
}

func TestCancelResume(t *testing.T) {
	forEach(t, func(t *testing.T, ts *task.Store) {
		tl := newTimeline(false)
		out, err := cancelResume(context.Background(), ts, "cancel", tl)
		if err != nil {
			t.Fatal(err)
		}
		defer logTimeline(t, tl)
		if !errors.Is(out.old.completeErr, fence.ErrLost) || len(out.old.refused) == 0 {
			t.Fatalf("cancelled executor: refused %v, completion %v", out.old.refused, out.old.completeErr)
		}
		if out.cur.completeErr != nil || out.task.State != task.Succeeded {
			t.Fatalf("resumed executor: %v, task %+v", out.cur.completeErr, out.task)
		}
		stepsOnce(t, out)
	})
}

func TestCrashResume(t *testing.T) {
	forEach(t, func(t *testing.T, ts *task.Store) {
		tl := newTimeline(false)
		out, err := crashResume(context.Background(), ts, ttl, "crash", tl)
		if err != nil {
			t.Fatal(err)
		}
		defer logTimeline(t, tl)
		if out.cur.completeErr != nil || out.task.State != task.Succeeded {
			t.Fatalf("resumed executor: %v, task %+v", out.cur.completeErr, out.task)
		}
		if len(out.cur.recorded) != 2 {
			t.Fatalf("B recorded %v; A had recorded search and read", out.cur.recorded)
		}
		stepsOnce(t, out)
	})
}

func logTimeline(t *testing.T, tl *timeline) {
	if t.Failed() || testing.Verbose() {
		for _, l := range tl.lines {
			t.Log(l)
		}
	}
}
