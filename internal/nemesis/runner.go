package nemesis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Links is what a runner cuts and heals: a Net, or a fake in tests.
type Links interface {
	Drop(ctx context.Context, from, to int) error
	Heal(ctx context.Context) error
}

// Procs kills and restarts a cluster's nodes for the schedule's Kill steps
// (clusters/partitions.sh: clusters/galera/galera.sh kill, rejoin, whole).
type Procs interface {
	// Whole returns nil when every node is up and in the primary
	// component: only then is a node killed.
	Whole(ctx context.Context) error
	Kill(ctx context.Context, node int) error
	// Rejoin starts a killed node again and returns once it has rejoined.
	Rejoin(ctx context.Context, node int) error
}

// Prober is a Procs that can also say which nodes' processes are alive
// and which are synced members of the primary component (Galera:
// wsrep_local_state 4 and Primary). With it the runner restarts a node
// that died on its own (a Galera joiner aborts when its donor is cut away,
// "State transfer cannot be completed, need to abort": issue 31's long
// run, where node 2 then stayed dead for 7 of the run's 8.5 minutes) and
// does not cut the kept node off from the only other synced member.
type Prober interface {
	Members(ctx context.Context) (alive, synced []int, err error)
}

// Runner plays a schedule on a Net.
type Runner struct {
	Net Links
	Rec *Record
	// Procs carries out Kill steps; without it they are recorded as
	// skipped.
	Procs Procs
	// Keep is the node the runner never leaves in a minority: a cut that
	// would, with a node still down (its rejoin failed), is skipped. 0:
	// Rec.Plan.Keep.
	Keep int
	// Start is the time the schedule's offsets count from (zero: when Run
	// is called).
	Start time.Time
	// WholeWait bounds the wait for a whole cluster before a kill (0: 60 s);
	// SyncWait the wait, before a cut, for the nodes it needs synced (0:
	// 15 s; then the cut is skipped); RejoinTries is how many times a
	// rejoin is tried in a row (0: 3).
	WholeWait, SyncWait time.Duration
	RejoinTries         int
	// Log, when set, is told every action as it happens (progress output).
	Log func(Event, Step)

	mu     sync.Mutex
	counts map[string]int
	down   map[int]bool
}

// Run plays the schedule from now until it ends or ctx is done, and heals
// every cut before it returns, whatever happened (with a context of its
// own: a cancelled run must not leave a cut behind), then rejoins a node
// still down. The returned error is the first failure to cut or heal; the
// schedule goes on after a failed cut (it is recorded), not after a failed
// heal.
//
// A Kill step waits for the cluster to be whole (Procs.Whole), kills the
// node, waits its Hold and rejoins it, trying RejoinTries times; the steps
// after it are shifted by the time that took, so every step keeps its
// quiet gap. A node whose rejoin failed is rejoined again before each
// later step and after each heal; while it is down (or, with a Prober,
// while a node it needs is not synced: waited for up to SyncWait), a step
// whose cuts would leave Keep without a majority (KeepsQuorum) is skipped
// and recorded as such. Time spent waiting before a cut or a kill shifts
// the rest of the schedule: holds and gaps are kept as drawn.
func (r *Runner) Run(ctx context.Context) (err error) {
	start := r.Start
	if start.IsZero() {
		start = time.Now()
	}
	keep := r.Keep
	if keep == 0 {
		keep = r.Rec.Plan.Keep
	}
	nodes := r.Rec.Net.Nodes
	if nodes == 0 {
		nodes = r.Rec.Plan.Nodes
	}
	var shift time.Duration // how late the schedule runs (rejoins, waits)
	defer func() {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if herr := r.Net.Heal(hctx); herr != nil && err == nil {
			err = herr
		}
		// A node still down is rejoined now that nothing is cut.
		for _, n := range r.downNodes() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			r.rejoin(rctx, -1, Step{Kind: Kill, Node: n}, start, 1)
			cancel()
		}
	}()
	wait := func(until time.Duration) bool {
		d := until + shift - time.Since(start)
		if d <= 0 {
			return ctx.Err() == nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// catchUp shifts the rest of the schedule when it runs late at the
	// planned offset at.
	catchUp := func(at time.Duration) {
		if late := time.Since(start) - (at + shift); late > 0 {
			shift += late
		}
	}
	tries := max(r.RejoinTries, 1)
	if r.RejoinTries == 0 {
		tries = 3
	}
	for i, s := range r.Rec.Steps {
		if s.Kind == Kill {
			if !wait(s.At) {
				return nil
			}
			r.kill(ctx, i, s, start, nodes)
			// The node stays down for the whole Hold, however long the
			// wait for a whole cluster took.
			catchUp(s.At)
			if !wait(s.At + s.Hold) {
				return nil
			}
			r.rejoin(ctx, i, s, start, tries)
			catchUp(s.end())
			continue
		}
		at := s.At
		for f := 0; f < max(s.Flaps, 1); f++ {
			if !wait(at) {
				return nil
			}
			if f == 0 || s.Gap >= time.Second {
				// A node still resyncing after the last heal is waited for
				// (up to SyncWait), not cut around.
				why := r.guard(ctx, i, s, start, nodes, keep)
				for deadline := time.Now().Add(r.syncWait()); why != "" && time.Now().Before(deadline) && ctx.Err() == nil; {
					select {
					case <-time.After(500 * time.Millisecond):
					case <-ctx.Done():
					}
					why = r.guard(ctx, i, s, start, nodes, keep)
				}
				// The hold is not shortened by the time the guard took.
				catchUp(at)
				if ctx.Err() != nil {
					// The run ended while the guard waited: no cut now.
					return err
				}
				if why != "" {
					r.note(i, s, "skipped: "+why, time.Since(start))
					at += s.Hold + s.Gap
					continue
				}
			}
			what := "cut"
			for _, c := range s.Cuts {
				if cerr := r.Net.Drop(ctx, c[0], c[1]); cerr != nil {
					what = "error: " + cerr.Error()
					if err == nil && ctx.Err() == nil { // not the run's end
						err = cerr
					}
				}
			}
			r.note(i, s, what, time.Since(start))
			if f == 0 {
				r.count(s.Kind)
			}
			at += s.Hold
			ok := wait(at)
			if herr := r.Net.Heal(context.WithoutCancel(ctx)); herr != nil {
				r.note(i, s, "error: "+herr.Error(), time.Since(start))
				return herr
			}
			r.note(i, s, "heal", time.Since(start))
			if !ok {
				return nil
			}
			// A rejoin that failed under the cut is tried again at once.
			for _, n := range r.downNodes() {
				r.rejoin(ctx, i, Step{Kind: Kill, Node: n}, start, 1)
			}
			at += s.Gap
		}
		catchUp(s.end())
	}
	return err
}

func (r *Runner) syncWait() time.Duration {
	if r.SyncWait > 0 {
		return r.SyncWait
	}
	return 15 * time.Second
}

// guard runs before a cut: it rejoins the nodes that are down (killed by
// the schedule, or found dead), and returns why the cut must not be made
// ("" if it may): it would leave keep without a majority of the nodes,
// counting a node down, or with a Prober one that is not a synced member.
func (r *Runner) guard(ctx context.Context, i int, s Step, start time.Time, nodes, keep int) string {
	out := r.revive(ctx, i, s, start, nodes)
	if out == nil {
		out = r.downSet()
	}
	if len(out) > 0 && !KeepsQuorum(nodes, keep, out, s.Cuts) {
		var ns []int
		for n := 1; n <= nodes; n++ {
			if out[n] {
				ns = append(ns, n)
			}
		}
		return fmt.Sprintf("would leave node %d in a minority with node(s) %v down or not synced", keep, ns)
	}
	return ""
}

// revive marks the nodes a Prober finds dead as down, rejoins every node
// down once, and returns the nodes that are not synced members (nil
// without a Prober, or when it failed).
func (r *Runner) revive(ctx context.Context, i int, s Step, start time.Time, nodes int) map[int]bool {
	p, _ := r.Procs.(Prober)
	var synced []int
	probed := false
	if p != nil {
		alive, sy, err := p.Members(ctx)
		if err != nil {
			r.note(i, s, "error: members: "+err.Error(), time.Since(start))
		} else {
			probed, synced = true, sy
			for n := 1; n <= nodes; n++ {
				if slices.Contains(alive, n) {
					continue
				}
				if r.markDown(n) {
					r.count("found-dead")
					r.note(i, Step{Kind: Kill, Node: n}, fmt.Sprintf("node %d found dead", n), time.Since(start))
				}
			}
		}
	}
	rejoined := false
	for _, n := range r.downNodes() {
		r.rejoin(ctx, i, Step{Kind: Kill, Node: n}, start, 1)
		rejoined = rejoined || !r.downSet()[n]
	}
	if probed && rejoined {
		// Another look now that they are back.
		_, sy, err := p.Members(ctx)
		if err != nil {
			r.note(i, s, "error: members: "+err.Error(), time.Since(start))
			probed = false
		}
		synced = sy
	}
	if !probed {
		return nil
	}
	out := r.downSet()
	for n := 1; n <= nodes; n++ {
		if !slices.Contains(synced, n) {
			out[n] = true
		}
	}
	return out
}

// kill carries out a Kill step's kill: once the cluster is whole.
func (r *Runner) kill(ctx context.Context, i int, s Step, start time.Time, nodes int) {
	if r.Procs == nil {
		r.note(i, s, "skipped: no way to kill a node (Procs)", time.Since(start))
		return
	}
	// A node that died on its own is started again first.
	r.revive(ctx, i, s, start, nodes)
	ww := r.WholeWait
	if ww <= 0 {
		ww = 60 * time.Second
	}
	deadline := time.Now().Add(ww)
	for {
		werr := r.Procs.Whole(ctx)
		if werr == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.note(i, s, "skipped: the cluster is not whole: "+werr.Error(), time.Since(start))
			return
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	if kerr := r.Procs.Kill(ctx, s.Node); kerr != nil {
		r.note(i, s, "error: kill: "+kerr.Error(), time.Since(start))
		return
	}
	r.markDown(s.Node)
	r.count(Kill)
	r.note(i, s, "kill", time.Since(start))
}

// rejoin starts a killed node again, up to tries times.
func (r *Runner) rejoin(ctx context.Context, i int, s Step, start time.Time, tries int) {
	r.mu.Lock()
	isDown := r.down[s.Node]
	r.mu.Unlock()
	if !isDown || r.Procs == nil {
		return
	}
	for t := 0; t < tries; t++ {
		// A rejoin is not cut short by the run's end: a half-started node
		// is worse than a late stop.
		rerr := r.Procs.Rejoin(context.WithoutCancel(ctx), s.Node)
		if rerr == nil {
			r.mu.Lock()
			delete(r.down, s.Node)
			r.mu.Unlock()
			r.count("rejoin")
			r.note(i, s, "rejoin", time.Since(start))
			return
		}
		r.count("rejoin-failed")
		r.note(i, s, "error: rejoin: "+rerr.Error(), time.Since(start))
		if ctx.Err() != nil {
			return
		}
	}
}

func (r *Runner) downSet() map[int]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[int]bool, len(r.down))
	for n := range r.down {
		m[n] = true
	}
	return m
}

// markDown records node n as down; true if it was not already.
func (r *Runner) markDown(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down == nil {
		r.down = map[int]bool{}
	}
	was := r.down[n]
	r.down[n] = true
	return !was
}

func (r *Runner) downNodes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.down))
}

func (r *Runner) count(kind string) {
	r.mu.Lock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[kind]++
	r.mu.Unlock()
}

func (r *Runner) note(i int, s Step, what string, t time.Duration) {
	e := Event{T: t, Step: i, What: what}
	r.mu.Lock()
	r.Rec.Applied = append(r.Rec.Applied, e)
	r.mu.Unlock()
	if r.Log != nil {
		r.Log(e, s)
	}
}

// Counts returns how many steps of each kind were started, and how many
// kills, rejoins ("rejoin") and failed rejoin attempts ("rejoin-failed").
func (r *Runner) Counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int, len(r.counts))
	for k, v := range r.counts {
		m[k] = v
	}
	return m
}
