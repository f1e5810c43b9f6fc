package zombie

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fence/fencemcp/internal/harness"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/task"
)

// steps is the number of steps (tool calls) of each task.
const steps = 3

// scenario runs one interleaving of a fault on a fresh task.
type scenario struct {
	name string
	run  func(w *world, rng *rand.Rand, id string)
}

var scenarios = []scenario{
	{"paused-agent", pausedAgent},
	{"lost-response", lostResponse},
	{"resumed-copy", resumedCopy},
	{"replan-mid-call", replanMidCall},
	{"ignored-cancel", ignoredCancel},
}

func (w *world) start(id string, conn *harness.Conn) *agent {
	ctx := context.Background()
	if err := w.ts.Create(ctx, id, task.Plan{Model: "scripted"}); err != nil {
		w.t.Fatal(err)
	}
	e := w.takeover(id, func() (task.Epoch, error) { return w.ts.Start(ctx, id) })
	return &agent{w: w, conn: conn, task: id, e: e}
}

// lapse ends the epoch as a lapsed lease would (the agent is frozen and
// does not renew), and another worker resumes the task.
func (w *world) lapseAndResume(id string, conn *harness.Conn) *agent {
	ctx := context.Background()
	w.revoke(id, func() (int64, error) { return w.fs.Revoke(ctx, "task:"+id) })
	e := w.takeover(id, func() (task.Epoch, error) { return w.ts.Resume(ctx, id) })
	return &agent{w: w, conn: conn, task: id, e: e}
}

// pausedAgent: the agent is frozen (between calls, or with a call stuck in
// the server) while its lease lapses and another worker resumes the task
// and runs it; then the agent thaws and goes on with its plan.
func pausedAgent(w *world, rng *rand.Rand, id string) {
	ctx := context.Background()
	a := w.start(id, w.a)
	j := rng.IntN(steps)
	if a.run(ctx, 0, j) != done {
		w.t.Fatalf("%s: the only agent was refused", id)
	}
	if rng.IntN(2) == 0 { // frozen between two calls
		b := w.lapseAndResume(id, w.b)
		b.run(ctx, 0, steps)
		a.run(ctx, j, steps)
		return
	}
	g := w.stop(id, j, a.e.Number(), "admitted") // frozen inside the server
	res := make(chan callStatus, 1)
	go func() { res <- a.call(ctx, j) }()
	<-g.reached
	b := w.lapseAndResume(id, w.b)
	b.run(ctx, 0, steps)
	close(g.release)
	if <-res == done {
		a.run(ctx, j+1, steps)
	}
}

// lostResponse: the tool commits and its response is lost; the agent
// retries the step, or dies and another worker resumes and retries it.
func lostResponse(w *world, rng *rand.Rand, id string) {
	ctx := context.Background()
	a := w.start(id, w.a)
	j := rng.IntN(steps)
	a.run(ctx, 0, j)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.then(id, j, a.e.Number(), "committed", cancel)
	// The cancel at the commit drops the response on most transports; an
	// answer that still got through (mcp-go over HTTP can deliver it) is
	// dropped here: either way the agent never learns the step committed.
	_ = a.call(cctx, j)
	if rng.IntN(2) == 0 {
		a.run(ctx, j, steps) // retry at the same epoch
		return
	}
	b := w.lapseAndResume(id, w.b)
	b.run(ctx, j, steps)
}

// resumedCopy: another worker resumes a copy of the task while the first
// still runs it; both go on concurrently.
func resumedCopy(w *world, rng *rand.Rand, id string) {
	ctx := context.Background()
	a := w.start(id, w.a)
	j := rng.IntN(steps + 1)
	a.run(ctx, 0, j)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rng.IntN(50) {
			runtime.Gosched()
		}
		a.run(ctx, j, steps)
	}()
	b := w.lapseAndResume(id, w.b)
	b.run(ctx, 0, steps)
	wg.Wait()
}

// replanMidCall: the plan is replaced while a tool call of the old plan is
// in the server, before its transaction or inside it; the new plan runs.
func replanMidCall(w *world, rng *rand.Rand, id string) {
	ctx := context.Background()
	a := w.start(id, w.a)
	j := rng.IntN(steps)
	a.run(ctx, 0, j)
	point := "admitted"
	if w.fenced && rng.IntN(2) == 0 {
		point = "locked"
	}
	g := w.stop(id, j, a.e.Number(), point)
	res := make(chan callStatus, 1)
	go func() { res <- a.call(ctx, j) }()
	<-g.reached
	var b *agent
	replan := func() {
		e := w.takeover(id, func() (task.Epoch, error) { return w.ts.Replan(ctx, id, task.Plan{Model: "replanned"}) })
		b = &agent{w: w, conn: w.a, task: id, e: e}
	}
	if point == "admitted" {
		replan()
		close(g.release)
	} else {
		// Inside the transaction the replan waits for the commit (the
		// lease row is share-locked): let it go while the call finishes.
		done := make(chan struct{})
		go func() { defer close(done); replan() }()
		for range rng.IntN(50) {
			runtime.Gosched()
		}
		close(g.release)
		<-done
	}
	if <-res == done {
		a.run(ctx, j+1, steps)
	}
	b.run(ctx, 0, steps)
}

// ignoredCancel: the agent cancels a call (closing its wait) and the task
// is cancelled; the server ignores the cancel and its tool goes on to
// commit. Later the task is resumed and run.
func ignoredCancel(w *world, rng *rand.Rand, id string) {
	ctx := context.Background()
	a := w.start(id, w.a)
	j := rng.IntN(steps)
	a.run(ctx, 0, j)
	cctx, cancel := context.WithCancel(ctx)
	g := w.stop(id, j, a.e.Number(), "admitted")
	fin := make(chan struct{})
	w.then(id, j, a.e.Number(), "finished", func() { close(fin) })
	res := make(chan callStatus, 1)
	go func() { res <- a.call(cctx, j) }()
	<-g.reached
	cancel()
	if st := <-res; st != lost {
		w.t.Fatalf("%s: a cancelled call returned %v", id, st)
	}
	w.revoke(id, func() (int64, error) { return w.ts.Cancel(ctx, id) })
	close(g.release)
	<-fin
	b := &agent{w: w, conn: w.b, task: id}
	b.e = w.takeover(id, func() (task.Epoch, error) { return w.ts.Resume(ctx, id) })
	b.run(ctx, 0, steps)
}

func budget() int {
	if n, err := strconv.Atoi(os.Getenv("ZOMBIE_N")); err == nil && n > 0 {
		return n
	}
	return 4
}

// TestZombie runs every scenario over every SDK × transport, fenced and
// control, and checks each interleaving's history.
func TestZombie(t *testing.T) {
	n := budget()
	teststore.EachOf(t, []teststore.Backend{teststore.SQLite, teststore.Postgres, teststore.MySQL}, func(t *testing.T, b teststore.Backend) {
		for _, combo := range harness.Combos {
			t.Run(combo[0]+"/"+combo[1], func(t *testing.T) {
				for _, fenced := range []bool{true, false} {
					mode := map[bool]string{true: "fenced", false: "control"}[fenced]
					w := newWorld(t, b.Open(t), combo[0], combo[1], fenced)
					for si, sc := range scenarios {
						runScenario(t, w, sc, si, n, b.Name, combo, mode)
					}
				}
			})
		}
	})
}

func runScenario(t *testing.T, w *world, sc scenario, si, n int, backend string, combo [2]string, mode string) {
	seed := uint64(si)*1_000_003 + 17
	if s, err := strconv.ParseUint(os.Getenv("ZOMBIE_SEED"), 10, 64); err == nil {
		seed = s
	}
	rng := rand.New(rand.NewPCG(seed, uint64(len(combo[0])+len(combo[1]))))
	var total verdict
	var caught, refusals, replays int
	for i := range n {
		id := fmt.Sprintf("%s-%d", sc.name, i)
		w.mu.Lock()
		w.history = nil
		w.mu.Unlock()
		sc.run(w, rng, id)
		w.mu.Lock()
		h := append([]porcupine.Operation(nil), w.history...)
		w.mu.Unlock()
		v := check(h)
		total.Stale += v.Stale
		total.Duplicates += v.Duplicates
		for _, op := range h {
			switch op.Output {
			case refused:
				refusals++
			case replayed:
				replays++
			}
		}
		bad := !v.Linearizable || v.Stale > 0 || v.Duplicates > 0
		if bad {
			caught++
		}
		if mode == "fenced" && bad {
			t.Errorf("%s %s: interleaving %d (seed %d) breaks the invariants: linearizable %v, %d stale, %d duplicate effects\n%s",
				sc.name, mode, i, seed, v.Linearizable, v.Stale, v.Duplicates, describe(h))
		}
		if mode == "control" && (v.Linearizable || (v.Stale == 0 && v.Duplicates == 0)) {
			t.Errorf("%s control: interleaving %d (seed %d) was not caught (linearizable %v, %d stale, %d duplicates): the suite could not fail here\n%s",
				sc.name, i, seed, v.Linearizable, v.Stale, v.Duplicates, describe(h))
		}
	}
	// The database's own record: every applied effect is in the history,
	// and (fenced) no step has two effects.
	var rows, dupSteps int
	if err := w.fs.DB().QueryRow(`SELECT COUNT(*) FROM ` + w.fs.Prefix() + `z_effects WHERE task_id LIKE '` + sc.name + `-%'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if err := w.fs.DB().QueryRow(`SELECT COUNT(*) FROM (SELECT task_id, step FROM ` + w.fs.Prefix() + `z_effects WHERE task_id LIKE '` + sc.name + `-%' GROUP BY task_id, step HAVING COUNT(*) > 1) d`).Scan(&dupSteps); err != nil {
		t.Fatal(err)
	}
	if mode == "fenced" && dupSteps != 0 {
		t.Errorf("%s fenced: %d steps have more than one effect row", sc.name, dupSteps)
	}
	if mode == "control" && dupSteps == 0 && total.Stale == 0 {
		t.Errorf("%s control: the database shows no duplicate and the history no stale effect", sc.name)
	}
	t.Logf("zombie %s %s/%s %-15s %-7s: %d interleavings, %d caught, %d stale, %d duplicate effects (%d steps with 2+ rows), %d refusals, %d replays, %d effect rows",
		backend, combo[0], combo[1], sc.name, mode, n, caught, total.Stale, total.Duplicates, dupSteps, refusals, replays, rows)
}

func describe(h []porcupine.Operation) string {
	var s string
	for _, op := range h {
		s += fmt.Sprintf("  [%d, %d] %s\n", op.Call, op.Return, model.DescribeOperation(op.Input, op.Output))
	}
	return s
}
