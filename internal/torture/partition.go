package torture

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fence/internal/nemesis"
)

// The partition nemesis: network cuts between a cluster's nodes, each node
// in a network namespace of its own (internal/nemesis), drawn from the
// run's seed and played while the clients run, across windows and
// barriers. The clients and the harness stay in the root namespace and so
// reach every node on both sides of a cut. The schedule, with what was
// applied when, is written to Out/nemesis.json; --nemesis-replay plays such
// a file again.

// NemesisConfig turns the partition nemesis on (Config.Nemesis).
type NemesisConfig struct {
	// Net names the namespaces the cluster's nodes run in (the cluster
	// script created them; the harness only adds and removes routes).
	Net nemesis.Net
	// Kinds are the fault kinds to draw (nemesis.Kinds).
	Kinds []string
	// FailoverTimeout is the time after which the cluster replaces a node
	// it cannot reach; cuts are drawn below and above it and the TTL.
	FailoverTimeout time.Duration
	// Keep is a node never cut off into a minority (0: none): the harness's
	// own node on Galera, whose binary log orders the checks.
	Keep int
	// Replay, when set, is a schedule file (nemesis.json of an earlier
	// run) played instead of drawing one.
	Replay string
	// Kill, when not 0, is a node the schedule SIGKILLs once (a third into
	// the run) and rejoins: in the schedule, not beside it, so that no cut
	// is held while it is down and it is only killed when the cluster is
	// whole (nemesis.Kill). KillCmd, RejoinCmd and WholeCmd are shell
	// commands; the node's number is appended to the first two (e.g.
	// "bash clusters/galera/galera.sh kill"); WholeCmd exits 0 when every
	// node is up and in the primary component.
	Kill                         int
	KillCmd, RejoinCmd, WholeCmd string
	// MembersCmd, when set, prints "alive: N…" and "synced: N…" (galera.sh
	// members): the runner then restarts a node that died on its own and
	// does not cut node Keep off from the only other synced member
	// (nemesis.Prober).
	MembersCmd string
}

// cmdProcs runs a NemesisConfig's commands.
type cmdProcs struct{ kill, rejoin, whole string }

// cmdProber is a cmdProcs with a members command.
type cmdProber struct {
	cmdProcs
	members string
}

func (p cmdProber) Members(ctx context.Context) (alive, synced []int, err error) {
	var out bytes.Buffer
	c := exec.CommandContext(ctx, "sh", "-c", p.members)
	c.Stdout = &out
	if err := c.Run(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.members, err)
	}
	seen := 0
	for _, l := range strings.Split(out.String(), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || (k != "alive" && k != "synced") {
			continue
		}
		seen++
		var ns []int
		for _, f := range strings.Fields(v) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %q is not a node number", p.members, f)
			}
			ns = append(ns, n)
		}
		if k == "alive" {
			alive = ns
		} else {
			synced = ns
		}
	}
	if seen != 2 {
		return nil, nil, fmt.Errorf("%s printed no alive: and synced: lines", p.members)
	}
	return alive, synced, nil
}

func runSh(ctx context.Context, cmd string, args ...string) error {
	line := cmd
	for _, a := range args {
		line += " " + a
	}
	c := exec.CommandContext(ctx, "sh", "-c", line)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		return fmt.Errorf("%s: %w (%s)", line, err, msg)
	}
	return nil
}

func (p cmdProcs) Whole(ctx context.Context) error { return runSh(ctx, p.whole) }
func (p cmdProcs) Kill(ctx context.Context, n int) error {
	return runSh(ctx, p.kill, strconv.Itoa(n))
}
func (p cmdProcs) Rejoin(ctx context.Context, n int) error {
	return runSh(ctx, p.rejoin, strconv.Itoa(n))
}

type partitionRun struct {
	rec    *nemesis.Record
	runner *nemesis.Runner
	cancel context.CancelFunc
	done   chan error
	// t0 is when the schedule started, in the harness's time (h.now()):
	// the offsets of rec.Applied count from it.
	t0 int64
}

// startPartitions draws (or loads) the schedule and starts playing it.
func (h *harness) startPartitions(ctx context.Context) (*partitionRun, error) {
	nc := h.cfg.Nemesis
	if nc == nil {
		return nil, nil
	}
	if err := nc.Net.Validate(); err != nil {
		return nil, err
	}
	var rec *nemesis.Record
	if nc.Replay != "" {
		r, err := nemesis.Load(nc.Replay)
		if err != nil {
			return nil, err
		}
		if r.Net != nc.Net {
			return nil, fmt.Errorf("torture: the schedule %s was recorded on %+v, this run's namespaces are %+v", nc.Replay, r.Net, nc.Net)
		}
		rec = r
	} else {
		d := h.cfg.Duration
		if d <= 0 {
			d = time.Hour // an --ops run: the runner stops with the run
		}
		p := nemesis.Plan{Nodes: nc.Net.Nodes, Kinds: nc.Kinds, Duration: d, TTL: h.cfg.TTL, FailoverTimeout: nc.FailoverTimeout, Keep: nc.Keep, Kill: nc.Kill}
		steps, err := nemesis.Generate(rand.New(rand.NewPCG(h.cfg.Seed, 3<<32)), p)
		if err != nil {
			return nil, err
		}
		rec = &nemesis.Record{Seed: h.cfg.Seed, Net: nc.Net, Plan: p, Steps: steps}
	}
	// Nothing of an earlier run may still be cut.
	if err := nc.Net.Heal(ctx); err != nil {
		return nil, err
	}
	if slices.ContainsFunc(rec.Steps, func(s nemesis.Step) bool { return s.Kind == nemesis.Kill }) && (nc.KillCmd == "" || nc.RejoinCmd == "" || nc.WholeCmd == "") {
		return nil, fmt.Errorf("torture: the schedule kills a node: the nemesis needs the kill, rejoin and whole commands")
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	start := time.Now()
	pr := &partitionRun{rec: rec, cancel: cancel, done: make(chan error, 1), t0: int64(start.Sub(h.start))}
	pr.runner = &nemesis.Runner{Net: nc.Net, Rec: rec, Start: start, Log: func(e nemesis.Event, s nemesis.Step) {
		switch e.What {
		case "cut":
			h.stats.fault("net-" + s.Kind)
		case "kill":
			h.stats.fault(fmt.Sprintf("node%d-killed", s.Node))
		case "rejoin":
			h.stats.fault(fmt.Sprintf("node%d-rejoined", s.Node))
		default:
			if strings.HasSuffix(e.What, "found dead") {
				h.stats.fault(fmt.Sprintf("node%d-found-dead", s.Node))
			} else if strings.HasPrefix(e.What, "skipped") {
				h.stats.fault("net-skipped")
			} else if strings.HasPrefix(e.What, "error: rejoin") {
				h.stats.fault(fmt.Sprintf("node%d-rejoin-failed", s.Node))
			}
		}
		if p := h.cfg.Progress; p != nil {
			fmt.Fprintf(p, "nemesis %6.1fs: %s (%s)\n", e.T.Seconds(), e.What, s)
		}
	}}
	if nc.KillCmd != "" || nc.MembersCmd != "" {
		cp := cmdProcs{kill: nc.KillCmd, rejoin: nc.RejoinCmd, whole: nc.WholeCmd}
		if nc.MembersCmd != "" {
			if nc.RejoinCmd == "" {
				return nil, fmt.Errorf("torture: the nemesis's members command needs the rejoin command (to restart a node found dead)")
			}
			pr.runner.Procs = cmdProber{cmdProcs: cp, members: nc.MembersCmd}
		} else {
			pr.runner.Procs = cp
		}
	}
	go func() { pr.done <- pr.runner.Run(pctx) }()
	return pr, nil
}

// stop ends the schedule (every cut healed when it returns) and writes it
// with what was applied next to the run's histories.
func (pr *partitionRun) stop(h *harness) (file string, err error) {
	if pr == nil {
		return "", nil
	}
	pr.cancel()
	err = <-pr.done
	if h.cfg.Out != "" {
		file = filepath.Join(h.cfg.Out, "nemesis.json")
		if serr := pr.rec.Save(file); serr != nil && err == nil {
			err = serr
		}
	}
	return file, err
}

// commitSpans records the operations that changed something and committed
// (acquire, renew, release, revoke, fenced writes: noteOp picks them, as it
// does for the failover pause), to measure the pauses after the nemesis's
// steps.
type commitSpans struct {
	mu    sync.Mutex
	calls []int64
	rets  []int64
}

func (c *commitSpans) add(o *op) {
	c.mu.Lock()
	c.calls = append(c.calls, o.Call)
	c.rets = append(c.rets, o.Return)
	c.mu.Unlock()
}

// Pause is one measured pause: after a nemesis event (a cut, a heal, a
// kill, a rejoin; "quiet": a probe 1 s before a cut, for comparison), the
// time until an operation begun after it committed.
type Pause struct {
	What string
	D    time.Duration
}

// pauses measures, for every event the runner applied, the time from it
// to the commit of the first operation begun after it (the definition of
// the PostgreSQL failover pause, failover.go): how long no client could
// commit. Barriers in between count (a barrier's reads stall behind a cut
// too). Events after the last commit are left out.
func (c *commitSpans) pauses(rec *nemesis.Record, t0 int64) []Pause {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.calls)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return c.calls[idx[a]] < c.calls[idx[b]] })
	calls := make([]int64, n)
	// sufMin[i]: the earliest return among the operations called at or
	// after calls[i].
	sufMin := make([]int64, n+1)
	sufMin[n] = -1
	for i := n - 1; i >= 0; i-- {
		calls[i] = c.calls[idx[i]]
		r := c.rets[idx[i]]
		if sufMin[i+1] >= 0 && sufMin[i+1] < r {
			r = sufMin[i+1]
		}
		sufMin[i] = r
	}
	at := func(t int64) (time.Duration, bool) {
		i := sort.Search(n, func(i int) bool { return calls[i] >= t })
		if i >= n {
			return 0, false
		}
		return time.Duration(sufMin[i] - t), true
	}
	var ps []Pause
	for _, e := range rec.Applied {
		if e.Step < 0 || e.Step >= len(rec.Steps) {
			continue
		}
		s := rec.Steps[e.Step]
		what := ""
		switch e.What {
		case "cut", "heal":
			what = s.Kind + " " + e.What
		case "kill", "rejoin":
			what = "node " + e.What
		default:
			continue
		}
		t := t0 + int64(e.T)
		if e.What == "cut" {
			if d, ok := at(t - int64(time.Second)); ok && t-int64(time.Second) > 0 {
				ps = append(ps, Pause{What: "quiet", D: min(d, time.Second)})
			}
		}
		if d, ok := at(t); ok {
			ps = append(ps, Pause{What: what, D: d})
		}
	}
	return ps
}

// pauseSummary formats pauses by what they followed: count, median, max.
func pauseSummary(ps []Pause) string {
	by := map[string][]time.Duration{}
	for _, p := range ps {
		by[p.What] = append(by[p.What], p.D)
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		ds := by[k]
		slices.Sort(ds)
		parts = append(parts, fmt.Sprintf("%s n=%d median %.2fs max %.2fs", k, len(ds), ds[len(ds)/2].Seconds(), ds[len(ds)-1].Seconds()))
	}
	return strings.Join(parts, "; ")
}
