// Package bench measures fence against the floor of the database it runs on:
// each lease operation next to the cheapest statement of the same kind
// (a single-row UPDATE that changes the row, or SELECT 1), measured in the
// same run, with round trips counted by a wrapper around the driver's
// connections; plus what it costs at scale (batch renewal, the runner,
// handoff between processes, many names) and what the usual alternatives
// cost (advisory locks, GET_LOCK). The Redis lock and the durable peers
// (ShedLock's and River's SQL) are measured by fence-bench-peers, a module
// of its own (internal/bench/peers), so that fence does not link a Redis
// client.
//
// The `go test -bench` benchmarks in the root package and `fence bench`
// both run this engine.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"time"

	"github.com/fencekit/fence"
)

// Config says how long to measure and what to include.
type Config struct {
	// Each case runs for Rounds × Budget in all (default 5 × 200ms), a few
	// operations at a time in turn with the others, so that a case and its
	// baseline see the same conditions; and at least Rounds × MinOps times
	// (default 5 × 5).
	Rounds int
	Budget time.Duration
	MinOps int
	// Batch is how many operations of one case run back to back before the
	// next case's turn (default 1).
	Batch int
	// Scale adds the scale experiments (batch renewal, runner, handoff, many
	// names), which take a minute or more per database.
	Scale bool
	// ScaleConfig tunes them; zero values take the defaults.
	ScaleConfig ScaleConfig
	// Log, when set, gets a line per step.
	Log io.Writer
}

func (c *Config) defaults() {
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	if c.Budget <= 0 {
		c.Budget = 200 * time.Millisecond
	}
	if c.MinOps <= 0 {
		c.MinOps = 5
	}
	if c.Batch <= 0 {
		c.Batch = 1
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	c.ScaleConfig.defaults()
}

// Result is one line of the table (and one object of --json).
type Result struct {
	Name    string `json:"name"`
	Dialect string `json:"dialect"`
	// NsPerOp is the median time of one operation.
	NsPerOp float64 `json:"ns_per_op"`
	// RoundTripsPerOp is the mean number of calls that reached the database
	// (statements, BEGIN/COMMIT/ROLLBACK, prepares, pings, pgx batches) per
	// operation, or of network turns where those are more (Counts.RoundTrips).
	RoundTripsPerOp float64 `json:"round_trips_per_op"`
	// Baseline is the case this one is compared with, and RatioToBaseline
	// the ratio of their medians, measured in the same run.
	Baseline        string  `json:"baseline"`
	RatioToBaseline float64 `json:"ratio_to_baseline"`

	Ops    int     `json:"ops"`
	MeanNs float64 `json:"mean_ns"`
	P99Ns  float64 `json:"p99_ns"`
	// Target is the case's target in words, and Met whether this run met it
	// (absent when there is no target).
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	// GivesUp says, for an alternative to fence, what it does not give.
	GivesUp string `json:"gives_up,omitempty"`
	// Statements is the per-operation breakdown of RoundTripsPerOp.
	Statements string `json:"statements,omitempty"`
	// Metrics holds the numbers of a scale experiment (named with units).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	Note    string             `json:"note,omitempty"`
	Skipped string             `json:"skipped,omitempty"`
}

// Run opens dsn and runs the cases (and, with cfg.Scale, the scale
// experiments) against it.
func Run(ctx context.Context, dsn string, cfg Config) ([]Result, error) {
	cfg.defaults()
	e, err := Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	l0, err0 := ReadLoadAverage()
	fmt.Fprintf(cfg.Log, "bench: %s (%s), tables %s*, load average %s\n", e.Redacted, e.Dialect, e.prefix, l0)
	out, err := RunCases(ctx, e, append(Cases(), Alternatives()...), cfg)
	if err == nil && cfg.Scale {
		var more []Result
		more, err = RunScale(ctx, e, cfg)
		out = append(out, more...)
	}
	if err != nil {
		return out, err
	}
	l1, err1 := ReadLoadAverage()
	fmt.Fprintf(cfg.Log, "bench: %s: load average %s at the end\n", e.Dialect, l1)
	return append(out, LoadResult(string(e.Dialect), l0, l1, err0, err1)), nil
}

// RunCases measures cases on e, interleaved a few operations at a time, and
// compares each with its baseline.
func RunCases(ctx context.Context, e *Env, cases []Case, cfg Config) ([]Result, error) {
	cfg.defaults()
	type state struct {
		c       Case
		op      Op
		s       sample
		skipped string
	}
	var states []*state
	defer func() {
		for _, st := range states {
			if st.op.Close != nil {
				st.op.Close()
			}
		}
	}()
	for _, c := range cases {
		if !c.RunsOn(e.Dialect) {
			continue
		}
		st := &state{c: c.For(e.Dialect)}
		states = append(states, st)
		op, err := c.Setup(ctx, e)
		if errors.Is(err, ErrSkip) {
			st.skipped = err.Error()
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("bench: %s: setup: %w", c.Name, err)
		}
		st.op = op
		// Warm up: connections, prepared statements, caches.
		var w sample
		if err := w.run(ctx, e, op, 20, 3, cfg.Budget/4); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", c.Name, err)
		}
		st.s.ready = w.ready // the warm-up left op prepared
	}
	// Round robin, a few operations of each case at a time, so that a case
	// and its baseline meet the same conditions: on this kind of machine
	// the cost of a durable commit drifts by several times within seconds.
	// The order is shuffled in every round, floors and baselines included:
	// in a fixed order each case always follows the same neighbour, and a
	// durable commit right after another durable commit is 6–14% cheaper
	// here than one after a read, which flattered the cases that followed
	// writes.
	budget := time.Duration(cfg.Rounds) * cfg.Budget
	spent := make([]time.Duration, len(states))
	order := make([]int, len(states))
	for i := range order {
		order[i] = i
	}
	for round := 0; ; round++ {
		busy := false
		mrand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			st := states[i]
			if st.skipped != "" || (spent[i] >= budget && len(st.s.durs) >= cfg.MinOps*cfg.Rounds) {
				continue
			}
			busy = true
			t0 := time.Now()
			if err := st.s.run(ctx, e, st.op, cfg.Batch, cfg.Batch, 0); err != nil {
				return nil, fmt.Errorf("bench: %s: %w", st.c.Name, err)
			}
			spent[i] += time.Since(t0)
		}
		if !busy {
			break
		}
		if round%200 == 0 {
			fmt.Fprintf(cfg.Log, "bench: %s: %d rounds\n", e.Dialect, round)
		}
	}
	medians := map[string]float64{}
	var out []Result
	for _, st := range states {
		r := Result{Name: st.c.Name, Dialect: string(e.Dialect), Baseline: st.c.Baseline, GivesUp: st.c.GivesUp, Skipped: st.skipped}
		if st.skipped == "" {
			s := stats(st.s.durs)
			n := float64(s.N)
			r.Ops = s.N
			r.NsPerOp = float64(s.Median.Nanoseconds())
			r.MeanNs = float64(s.Mean.Nanoseconds())
			r.P99Ns = float64(s.P99.Nanoseconds())
			r.RoundTripsPerOp = float64(st.s.counts.RoundTrips()) / n
			r.Statements = breakdown(st.s.counts, n)
			medians[r.Name] = r.NsPerOp
		}
		out = append(out, r)
	}
	for i := range out {
		r, c := &out[i], states[i].c
		if b, ok := medians[r.Baseline]; ok && r.Skipped == "" && b > 0 {
			r.RatioToBaseline = r.NsPerOp / b
		}
		if c.MaxRatio > 0 || c.MaxRoundTrips > 0 {
			r.Target, r.Met = target(c, *r)
		}
	}
	return out, nil
}

func target(c Case, r Result) (string, *bool) {
	met := r.Skipped == ""
	var words string
	if c.MaxRatio > 0 {
		words = fmt.Sprintf("<= %.2fx %s", c.MaxRatio, c.Baseline)
		met = met && r.RatioToBaseline > 0 && r.RatioToBaseline <= c.MaxRatio
	}
	if c.MaxRoundTrips > 0 {
		if words != "" {
			words += ", "
		}
		words += fmt.Sprintf("%g round trip", c.MaxRoundTrips)
		met = met && r.RoundTripsPerOp <= c.MaxRoundTrips+0.001
	}
	return words, &met
}

// breakdown says which calls made up the round trips, per operation.
func breakdown(c Counts, n float64) string {
	var s string
	add := func(k string, v int64) {
		if v == 0 {
			return
		}
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("%s=%.3g", k, float64(v)/n)
	}
	add("batch", c.Batch)
	add("begin", c.Begin)
	add("exec", c.Exec)
	add("query", c.Query)
	add("prepare", c.Prepare)
	add("commit", c.Commit)
	add("rollback", c.Rollback)
	add("ping", c.Ping)
	add("net", c.Net)
	return s
}

// Dialects lists the databases fence supports, for callers that loop.
var Dialects = []fence.Dialect{fence.SQLite, fence.Postgres, fence.MySQL}
