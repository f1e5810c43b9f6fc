package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/task"
)

// model is a deterministic fake language model: each step "thinks" for a
// while and returns a result derived from the model name and the step.
type model struct {
	name  string
	think time.Duration
}

func (m model) run(ctx context.Context, step string, ignoreCancel bool) (string, error) {
	t := time.NewTimer(m.think)
	defer t.Stop()
	if ignoreCancel {
		// A stale executor that does not look at its context: the case the
		// fence exists for.
		<-t.C
	} else {
		select {
		case <-t.C:
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	}
	return fmt.Sprintf("%s:%s", m.name, step), nil
}

// timeline prints what happens, with times relative to its start.
type timeline struct {
	mu    sync.Mutex
	start time.Time
	lines []string
	print bool
}

func newTimeline(print bool) *timeline { return &timeline{start: time.Now(), print: print} }

func (t *timeline) log(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	line := fmt.Sprintf("%+6.2fs  ", time.Since(t.start).Seconds()) + fmt.Sprintf(format, args...)
	t.lines = append(t.lines, line)
	if t.print {
		fmt.Println(line)
	}
}

// executor runs a plan's steps for one epoch, skipping steps some earlier
// epoch already recorded (a resumed task does not redo finished work), and
// finishes the task with a summary of all step results.
type executor struct {
	who          string
	tasks        *task.Store
	model        model
	ignoreCancel bool
	// afterStep, if set, runs after each recorded step (tests pause or kill
	// the executor there).
	afterStep func(step string)
	tl        *timeline
}

// result is what one executor's attempt ended with.
type result struct {
	recorded, refused []string
	completeErr       error
}

func (x *executor) run(ctx context.Context, e task.Epoch, steps []string) result {
	var r result
	done, err := x.tasks.Steps(ctx, e.Task)
	if err != nil {
		r.completeErr = err
		return r
	}
	have := map[string]string{}
	for _, s := range done {
		have[s.Key] = s.Result
	}
	var results []string
	for _, step := range steps {
		if res, ok := have[step]; ok {
			x.tl.log("%s epoch %d: step %q already recorded by an earlier epoch, skipped", x.who, e.Number(), step)
			results = append(results, res)
			continue
		}
		res, err := x.model.run(ctx, step, x.ignoreCancel)
		if err != nil {
			x.tl.log("%s epoch %d: stopped at step %q: %v", x.who, e.Number(), step, err)
			r.completeErr = err
			return r
		}
		ok, err := x.tasks.RecordStep(context.WithoutCancel(ctx), e, step, res)
		switch {
		case errors.Is(err, fence.ErrLost):
			x.tl.log("%s epoch %d: tool result %q REJECTED: %v", x.who, e.Number(), step, err)
			r.refused = append(r.refused, step)
		case err != nil:
			r.completeErr = err
			return r
		case ok:
			x.tl.log("%s epoch %d: recorded %q = %s", x.who, e.Number(), step, res)
			r.recorded = append(r.recorded, step)
		}
		results = append(results, res)
		if x.afterStep != nil {
			x.afterStep(step)
		}
	}
	summary := "summary by " + x.model.name + " of [" + strings.Join(results, ", ") + "]"
	r.completeErr = x.tasks.Complete(context.WithoutCancel(ctx), e, summary)
	if r.completeErr != nil {
		x.tl.log("%s epoch %d: final summary REJECTED: %v", x.who, e.Number(), r.completeErr)
	} else {
		x.tl.log("%s epoch %d: completed: %s", x.who, e.Number(), summary)
	}
	return r
}

var steps = []string{"search", "read", "draft", "review"}

// scenarioOutcome is what a scenario's test checks.
type scenarioOutcome struct {
	old, cur result
	task     task.Task
	steps    []task.Step
}

// modelSwitch: plan v1 (a small model) is running when the orchestrator
// switches to a large model (Replan). v1 runs to its natural end and tries
// to record tool results and its summary: all refused. v2's summary stands.
func modelSwitch(ctx context.Context, ts *task.Store, id string, tl *timeline) (scenarioOutcome, error) {
	var out scenarioOutcome
	if err := ts.Create(ctx, id, task.Plan{Model: "small-v1", Text: strings.Join(steps, ",")}); err != nil {
		return out, err
	}
	e1, err := ts.Start(ctx, id)
	if err != nil {
		return out, err
	}
	tl.log("v1 (small-v1) started at epoch %d", e1.Number())
	switched := make(chan struct{})
	v1 := &executor{who: "v1", tasks: ts, model: model{"small-v1", 60 * time.Millisecond}, ignoreCancel: true, tl: tl,
		afterStep: func(step string) {
			if step == "read" {
				close(switched)
				time.Sleep(150 * time.Millisecond) // v2 gets going while v1 is mid-plan
			}
		}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); out.old = v1.run(ctx, e1, steps) }()
	<-switched
	e2, err := ts.Replan(ctx, id, task.Plan{Model: "large-v2", Text: strings.Join(steps, ",")})
	if err != nil {
		return out, err
	}
	tl.log("orchestrator switched model: v2 (large-v2) at epoch %d supersedes epoch %d", e2.Number(), e1.Number())
	v2 := &executor{who: "v2", tasks: ts, model: model{"large-v2", 20 * time.Millisecond}, tl: tl}
	out.cur = v2.run(ctx, e2, steps)
	wg.Wait()
	return out, collect(ctx, ts, id, &out)
}

// cancelResume: executor A is cancelled mid-task; its late writes are
// refused; executor B resumes the task and completes it.
func cancelResume(ctx context.Context, ts *task.Store, id string, tl *timeline) (scenarioOutcome, error) {
	var out scenarioOutcome
	if err := ts.Create(ctx, id, task.Plan{Model: "m", Text: strings.Join(steps, ",")}); err != nil {
		return out, err
	}
	ea, err := ts.Start(ctx, id)
	if err != nil {
		return out, err
	}
	tl.log("A started at epoch %d", ea.Number())
	cancelled := make(chan struct{})
	a := &executor{who: "A", tasks: ts, model: model{"m", 50 * time.Millisecond}, ignoreCancel: true, tl: tl,
		afterStep: func(step string) {
			if step == "search" {
				close(cancelled)
				time.Sleep(100 * time.Millisecond)
			}
		}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); out.old = a.run(ctx, ea, steps) }()
	<-cancelled
	f, err := ts.Cancel(ctx, id)
	if err != nil {
		return out, err
	}
	tl.log("operator cancelled the task: epoch %d", f)
	wg.Wait() // A runs on and is refused
	eb, err := ts.Resume(ctx, id)
	if err != nil {
		return out, err
	}
	tl.log("B resumed the task at epoch %d", eb.Number())
	b := &executor{who: "B", tasks: ts, model: model{"m", 20 * time.Millisecond}, tl: tl}
	out.cur = b.run(ctx, eb, steps)
	return out, collect(ctx, ts, id, &out)
}

// crashResume: executor A dies after recording two steps and while the third
// is in flight (in process here: it stops without releasing its lease; the
// tests also kill a real process). B resumes once A's lease lapses by the
// database clock, skips A's recorded steps, and finishes; no step is stored
// twice.
func crashResume(ctx context.Context, ts *task.Store, ttl time.Duration, id string, tl *timeline) (scenarioOutcome, error) {
	var out scenarioOutcome
	if err := ts.Create(ctx, id, task.Plan{Model: "m", Text: strings.Join(steps, ",")}); err != nil {
		return out, err
	}
	ea, err := ts.Start(ctx, id)
	if err != nil {
		return out, err
	}
	tl.log("A started at epoch %d (lease TTL %v)", ea.Number(), ttl)
	crash := make(chan struct{})
	a := &executor{who: "A", tasks: ts, model: model{"m", 20 * time.Millisecond}, tl: tl,
		afterStep: func(step string) {
			if step == "read" {
				tl.log("A crashed while working on %q (no release, no renewals)", "draft")
				close(crash)
				select {} // the goroutine stands for a dead process
			}
		}}
	go a.run(ctx, ea, steps)
	<-crash
	if _, err := ts.Resume(ctx, id); !errors.Is(err, fence.ErrHeld) {
		return out, fmt.Errorf("resume while A's lease is valid: %v, want ErrHeld", err)
	}
	var eb task.Epoch
	for {
		eb, err = ts.Resume(ctx, id)
		if err == nil {
			break
		}
		if !errors.Is(err, fence.ErrHeld) {
			return out, err
		}
		time.Sleep(ttl / 10)
	}
	tl.log("B resumed at epoch %d after A's lease lapsed", eb.Number())
	b := &executor{who: "B", tasks: ts, model: model{"m", 20 * time.Millisecond}, tl: tl}
	out.cur = b.run(ctx, eb, steps)
	return out, collect(ctx, ts, id, &out)
}

func collect(ctx context.Context, ts *task.Store, id string, out *scenarioOutcome) error {
	var err error
	if out.task, err = ts.Get(ctx, id); err != nil {
		return err
	}
	out.steps, err = ts.Steps(ctx, id)
	return err
}
