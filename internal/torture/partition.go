package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
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
}

type partitionRun struct {
	rec    *nemesis.Record
	runner *nemesis.Runner
	cancel context.CancelFunc
	done   chan error
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
		p := nemesis.Plan{Nodes: nc.Net.Nodes, Kinds: nc.Kinds, Duration: d, TTL: h.cfg.TTL, FailoverTimeout: nc.FailoverTimeout, Keep: nc.Keep}
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
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pr := &partitionRun{rec: rec, cancel: cancel, done: make(chan error, 1)}
	pr.runner = &nemesis.Runner{Net: nc.Net, Rec: rec, Log: func(e nemesis.Event, s nemesis.Step) {
		if e.What == "cut" {
			h.stats.fault("net-" + s.Kind)
		}
		if p := h.cfg.Progress; p != nil {
			fmt.Fprintf(p, "nemesis %6.1fs: %s (%s)\n", e.T.Seconds(), e.What, s)
		}
	}}
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
