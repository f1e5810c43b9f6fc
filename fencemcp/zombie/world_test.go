package zombie

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencemcp"
	"github.com/fencekit/fence/fencemcp/internal/harness"
	"github.com/fencekit/fence/task"
)

// Operation kinds of the history.
const (
	opApply    = "apply"    // one execution of the tool, as the server saw it
	opTakeover = "takeover" // a new epoch holds the task (Start, Resume, Replan)
	opRevoke   = "revoke"   // the epoch was revoked (Cancel, a lapsed lease)
)

// Outputs of an apply.
const (
	applied  = "applied"  // the effect committed
	replayed = "replayed" // the step had committed before: its result was returned
	refused  = "refused"  // nothing committed
	unknown  = "unknown"  // the commit's outcome is unknown
)

type input struct {
	Kind  string
	Task  string
	Step  int // index of the step key
	Epoch int64
}

// world is one SDK × transport × mode: a fence store, a task store, the
// tool's tables, two MCP servers (two replicas sharing the database) and a
// client connected to each (two workers).
type world struct {
	t       testing.TB
	fenced  bool
	fs      *fence.Store
	ts      *task.Store
	lc      *fencemcp.LeaseChecker
	ledger  *task.Ledger  // the agent side's effect ledger (fenced mode)
	key     []byte        // the HMAC key clients and servers share
	a, b    *harness.Conn // worker A's and worker B's connections
	t0      time.Time
	mu      sync.Mutex
	history []porcupine.Operation
	gates   map[string]*gate
	q       struct{ claim, stored, effect string }
}

// gate stops the tool for one (task, step, epoch) at a point: it closes
// reached when there, then waits for release (or runs fn and goes on).
type gate struct {
	point   string
	reached chan struct{}
	release chan struct{}
	fn      func()
}

func newWorld(t testing.TB, fs *fence.Store, sdk, wire string, fenced bool) *world {
	w := &world{t: t, fenced: fenced, fs: fs, t0: time.Now(), gates: map[string]*gate{}}
	var err error
	if w.ts, err = task.New(fs); err != nil {
		t.Fatal(err)
	}
	p := fs.Prefix()
	for _, ddl := range []string{
		// The step ledger of the fenced tool: one row per (task, step).
		`CREATE TABLE ` + p + `z_steps (task_id VARCHAR(100) NOT NULL, step VARCHAR(100) NOT NULL, epoch BIGINT NOT NULL, PRIMARY KEY (task_id, step))`,
		// Every application of an effect, fenced or not: the ground truth.
		`CREATE TABLE ` + p + `z_effects (task_id VARCHAR(100) NOT NULL, step VARCHAR(100) NOT NULL, epoch BIGINT NOT NULL)`,
	} {
		if _, err := fs.DB().Exec(ddl); err != nil {
			t.Fatal(err)
		}
	}
	insIgnore := `INSERT INTO ` + p + `z_steps (task_id, step, epoch) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`
	if fs.Dialect() == fence.MySQL {
		insIgnore = `INSERT IGNORE INTO ` + p + `z_steps (task_id, step, epoch) VALUES (?, ?, ?)`
	}
	w.q.claim = fs.Rebind(insIgnore)
	w.q.effect = fs.Rebind(`INSERT INTO ` + p + `z_effects (task_id, step, epoch) VALUES (?, ?, ?)`)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	w.key = key
	w.key = key
	o := harness.Options{SDK: sdk, Wire: wire, Tool: w.tool}
	if fenced {
		if w.lc, err = fencemcp.NewLeaseChecker(fs); err != nil {
			t.Fatal(err)
		}
		v, _ := fencemcp.NewVerifier(key, nil)
		o.Guard, _ = fencemcp.NewGuard(v, w.lc)
		o.Stamper, _ = fencemcp.NewStamper(key, true)
		// A step in doubt (its call's answer was lost, or its epoch was
		// superseded mid-call) is decided by asking the server again under
		// the asking epoch with the same step key: the tool answers a step
		// it committed with the stored result instead of acting again.
		if w.ledger, err = task.NewLedger(w.ts, task.WithReconcile(w.reconcile),
			// An agent's own earlier attempt that lost its answer is over
			// when the agent retries (it makes one call at a time), so its
			// claim is in doubt as soon as the database clock moved on.
			task.WithInDoubtAfter(time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	w.a = harness.Start(t, o)
	w.b = harness.Start(t, o)
	return w
}

func (w *world) now() int64 { return time.Since(w.t0).Nanoseconds() }

func (w *world) record(in input, out string, call int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.history = append(w.history, porcupine.Operation{Input: in, Output: out, Call: call, Return: w.now()})
}

func gateKey(taskID string, step int, epoch int64, point string) string {
	return fmt.Sprintf("%s/%d/%d/%s", taskID, step, epoch, point)
}

// stop sets a gate for the tool's execution of step at epoch.
func (w *world) stop(taskID string, step int, epoch int64, point string) *gate {
	g := &gate{point: point, reached: make(chan struct{}), release: make(chan struct{})}
	w.mu.Lock()
	w.gates[gateKey(taskID, step, epoch, point)] = g
	w.mu.Unlock()
	return g
}

// then sets a gate that runs fn at point and goes on.
func (w *world) then(taskID string, step int, epoch int64, point string, fn func()) {
	g := &gate{point: point, reached: make(chan struct{}), fn: fn}
	w.mu.Lock()
	w.gates[gateKey(taskID, step, epoch, point)] = g
	w.mu.Unlock()
}

func (w *world) pass(taskID string, step int, epoch int64, point string) {
	w.mu.Lock()
	g := w.gates[gateKey(taskID, step, epoch, point)]
	delete(w.gates, gateKey(taskID, step, epoch, point))
	w.mu.Unlock()
	if g == nil {
		return
	}
	close(g.reached)
	if g.fn != nil {
		g.fn()
		return
	}
	<-g.release
}

// tool is the MCP tool: an effect per step. Fenced, it takes task, step and
// epoch from the verified claim and writes in a transaction that checks
// the claim under the lease row's lock and claims the step; the control
// takes them from its arguments and just writes. It ignores cancellation
// (context.WithoutCancel), as a server may.
func (w *world) tool(ctx context.Context, a harness.Args) (string, error) {
	call := w.now()
	taskID, step, epoch := a.Payload, 0, a.Epoch
	if _, err := fmt.Sscanf(a.Step, "s%d", &step); err != nil {
		return "", fmt.Errorf("step %q: %v", a.Step, err)
	}
	var c fencemcp.Claim
	if w.fenced {
		var ok bool
		if c, ok = fencemcp.ClaimFrom(ctx); !ok {
			return "", errors.New("no claim")
		}
		taskID, _ = c.Task()
		epoch = c.Fence
		if _, err := fmt.Sscanf(c.Step, "s%d", &step); err != nil {
			return "", fmt.Errorf("step %q: %v", c.Step, err)
		}
	}
	ctx = context.WithoutCancel(ctx)
	defer w.pass(taskID, step, epoch, "finished")
	in := input{Kind: opApply, Task: taskID, Step: step, Epoch: epoch}
	w.pass(taskID, step, epoch, "admitted")
	if !w.fenced {
		call = w.now() // the write commits on its own: its interval is the statement
		if _, err := w.fs.DB().ExecContext(ctx, w.q.effect, taskID, a.Step, epoch); err != nil {
			w.record(in, unknown, call)
			return "", err
		}
		w.record(in, applied, call)
		w.pass(taskID, step, epoch, "committed")
		return applied, nil
	}
	out := applied
	err := w.lc.InTx(ctx, c, func(tx *sql.Tx) error {
		w.pass(taskID, step, epoch, "locked")
		res, err := tx.ExecContext(ctx, w.q.claim, taskID, c.Step, epoch)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			out = replayed // committed before, by this epoch or an older one
			return nil
		}
		_, err = tx.ExecContext(ctx, w.q.effect, taskID, c.Step, epoch)
		// The effect takes place at the commit, which InTx makes next: the
		// operation's interval starts here, so it holds the commit and
		// not the wait before it.
		call = w.now()
		return err
	})
	switch {
	case errors.Is(err, fencemcp.ErrSuperseded):
		w.record(in, refused, call)
		return "", err
	case err != nil:
		w.record(in, unknown, call)
		return "", err
	}
	w.record(in, out, call)
	w.pass(taskID, step, epoch, "committed")
	return out, nil
}

// do runs an epoch change and records it.
func (w *world) takeover(taskID string, fn func() (task.Epoch, error)) task.Epoch {
	call := w.now()
	e, err := fn()
	if err != nil {
		w.t.Fatalf("takeover of %s: %v", taskID, err)
	}
	w.record(input{Kind: opTakeover, Task: taskID, Epoch: e.Number()}, "", call)
	return e
}

func (w *world) revoke(taskID string, fn func() (int64, error)) {
	call := w.now()
	f, err := fn()
	if err != nil {
		w.t.Fatalf("revoke of %s: %v", taskID, err)
	}
	w.record(input{Kind: opRevoke, Task: taskID, Epoch: f}, "", call)
}

// agent is one worker's executor of a task at an epoch, over conn.
type agent struct {
	w    *world
	conn *harness.Conn
	task string
	e    task.Epoch
}

// callStatus is what the agent concluded from a call.
type callStatus int

const (
	done    callStatus = iota // applied or replayed
	stopped                   // refused: superseded, do not retry
	lost                      // no answer
)

// errRefused is a call the server refused as stale: nothing happened.
var errRefused = errors.New("refused by the server: superseded")

// reconcile is the ledger's hook: it repeats the call under the asking
// epoch; the tool replays a committed step.
func (w *world) reconcile(ctx context.Context, d task.Doubt) (task.Resolution, error) {
	step := d.Step
	out, err := w.a.Call(fencemcp.WithStep(ctx, d.Current, step), harness.Args{Payload: d.Task, Step: step})
	switch {
	case err != nil:
		return task.Resolution{}, err
	case out.IsError:
		return task.Resolution{}, fmt.Errorf("%w: %s", errRefused, out.Text)
	}
	return task.Resolution{Applied: true, Result: []byte(out.Text)}, nil
}

// call calls the tool for step as the agent; ctx may end the wait. Fenced,
// the call is the effect of the step in the ledger: a step committed by
// any epoch is not called again, and a superseded epoch is refused before
// it calls.
func (ag *agent) call(ctx context.Context, step int) callStatus {
	a := harness.Args{Payload: ag.task, Step: fmt.Sprintf("s%d", step)}
	if !ag.w.fenced {
		a.Epoch = ag.e.Number()
		return ag.send(ctx, a)
	}
	var st callStatus
	var err error
	for range 1000 { // bounded: a claim is in doubt after a millisecond of the database clock
		if _, err = ag.do(ctx, a, &st); !errors.Is(err, task.ErrInFlight) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	switch {
	case err == nil:
		return done
	case errors.Is(err, task.ErrStaleEpoch), errors.Is(err, errRefused):
		return stopped
	case st == lost, ctx.Err() != nil:
		// No answer, or the wait ended before the ledger recorded one:
		// the step is in doubt for the next attempt.
		return lost
	}
	ag.w.t.Errorf("agent %s epoch %d step %d: %v", ag.task, ag.e.Number(), step, err)
	return stopped
}

// do is one attempt of the step through the ledger.
func (ag *agent) do(ctx context.Context, a harness.Args, st *callStatus) (task.Effect, error) {
	return ag.w.ledger.Do(ctx, ag.e, a.Step, []byte(a.Step), func(ctx context.Context) ([]byte, error) {
		*st = ag.send(fencemcp.WithStep(ctx, ag.e, a.Step), a)
		switch *st {
		case stopped:
			return nil, task.NotApplied(errRefused)
		case lost:
			return nil, errors.New("the answer was lost")
		}
		return []byte("ok"), nil
	})
}

// send makes one tool call.
func (ag *agent) send(ctx context.Context, a harness.Args) callStatus {
	out, err := ag.conn.Call(ctx, a)
	switch {
	case err != nil:
		return lost
	case out.Refused && !out.Refusal.Retry:
		return stopped
	case out.IsError:
		ag.w.t.Errorf("agent %s epoch %d step %s: tool error %q", ag.task, ag.e.Number(), a.Step, out.Text)
		return stopped
	}
	return done
}

// run calls steps from..to-1 in order and stops at a refusal.
func (ag *agent) run(ctx context.Context, from, to int) callStatus {
	for s := from; s < to; s++ {
		if st := ag.call(ctx, s); st != done {
			return st
		}
	}
	return done
}
