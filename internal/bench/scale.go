package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencekit/fence"
)

// ScaleConfig tunes the scale experiments; zero fields take the defaults
// in parentheses, Quick takes tiny ones (for CI, so the code cannot rot).
type ScaleConfig struct {
	Quick bool
	// Steps limits the experiments to these (batch, runner, handoff, crash,
	// many); empty runs them all.
	Steps []string
	// BatchSizes are the numbers of held leases renewed per tick (1, 100,
	// 10,000), each for BatchTicks ticks (10).
	BatchSizes []int
	BatchTicks int
	// RunnerLeases runners (100) with RunnerTTL (3s) are watched for
	// RunnerWindow (6s) in their steady state.
	RunnerLeases int
	RunnerTTL    time.Duration
	RunnerWindow time.Duration
	// HandoffSamples releases are timed until another process holds the
	// lease (PostgreSQL 50, elsewhere 15), and CrashSamples takeovers after
	// a holder stopped without releasing, with CrashTTL (10, 1s).
	HandoffSamples int
	CrashSamples   int
	CrashTTL       time.Duration
	// Names lease names (100,000) are competed for by each of Workers
	// (1, 2, 4, 8, 16) for ManyDuration (3s).
	Names        int
	Workers      []int
	ManyDuration time.Duration
}

func (c *ScaleConfig) defaults() {
	if c.Quick {
		def(&c.BatchSizes, []int{1, 100})
		defInt(&c.BatchTicks, 2)
		defInt(&c.RunnerLeases, 3)
		defDur(&c.RunnerTTL, 300*time.Millisecond)
		defDur(&c.RunnerWindow, 300*time.Millisecond)
		defInt(&c.HandoffSamples, 2)
		defInt(&c.CrashSamples, 1)
		defDur(&c.CrashTTL, 100*time.Millisecond)
		defInt(&c.Names, 1000)
		def(&c.Workers, []int{1, 2})
		defDur(&c.ManyDuration, 200*time.Millisecond)
	}
	def(&c.BatchSizes, []int{1, 100, 10_000})
	defInt(&c.BatchTicks, 10)
	defInt(&c.RunnerLeases, 100)
	defDur(&c.RunnerTTL, 3*time.Second)
	defDur(&c.RunnerWindow, 6*time.Second)
	defInt(&c.CrashSamples, 10)
	defDur(&c.CrashTTL, time.Second)
	defInt(&c.Names, 100_000)
	def(&c.Workers, []int{1, 2, 4, 8, 16})
	defDur(&c.ManyDuration, 3*time.Second)
}

func def[T any](p *[]T, v []T) {
	if len(*p) == 0 {
		*p = v
	}
}

func defInt(p *int, v int) {
	if *p <= 0 {
		*p = v
	}
}

func defDur(p *time.Duration, v time.Duration) {
	if *p <= 0 {
		*p = v
	}
}

// RunScale runs the scale experiments on e.
func RunScale(ctx context.Context, e *Env, cfg Config) ([]Result, error) {
	cfg.defaults()
	sc := cfg.ScaleConfig
	var out []Result
	steps := []struct {
		key, name string
		fn        func(context.Context, *Env, ScaleConfig) ([]Result, error)
	}{
		{"batch", "batch renewal", batchRenew},
		{"runner", "runner", runnerCost},
		{"handoff", "handoff", handoffLatency},
		{"crash", "takeover after a crash", crashTakeover},
		{"many", "many names", manyNames},
	}
	for _, st := range steps {
		if len(sc.Steps) > 0 && !slices.Contains(sc.Steps, st.key) {
			continue
		}
		fmt.Fprintf(cfg.Log, "bench: %s: %s\n", e.Dialect, st.name)
		rs, err := st.fn(ctx, e, sc)
		if err != nil {
			return out, fmt.Errorf("bench: %s: %w", st.name, err)
		}
		for i := range rs {
			rs[i].Dialect = string(e.Dialect)
		}
		out = append(out, rs...)
	}
	return out, nil
}

func owner() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// HoldMany makes n held leases name-0 … name-(n-1) in bulk, with rows
// written directly (acquiring 10,000 leases one durable commit at a time
// would take minutes), and returns their tokens.
func HoldMany(ctx context.Context, e *Env, name string, n int) ([]fence.Token, error) {
	ts := make([]fence.Token, n)
	now := e.Store.NowSQL()
	for start := 0; start < n; start += 500 {
		var b strings.Builder
		var args []any
		fmt.Fprintf(&b, "INSERT INTO %s (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, renew_count) VALUES ", e.Table("leases"))
		for i := start; i < min(start+500, n); i++ {
			ts[i] = fence.Token{Lease: fmt.Sprintf("%s-%d", name, i), Owner: owner(), Fence: 1}
			if i > start {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "(?, ?, 1, 'held', %s + 3600000, %s, %s, 0)", now, now, now)
			args = append(args, ts[i].Lease, ts[i].Owner)
		}
		if _, err := e.DB.ExecContext(ctx, e.Rebind(b.String()), args...); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// batchRenew: RenewBatch of 1, 100 and 10,000 held leases; the target is at
// most 5 statements per tick, with a result per lease.
func batchRenew(ctx context.Context, e *Env, sc ScaleConfig) ([]Result, error) {
	var out []Result
	for _, n := range sc.BatchSizes {
		ts, err := HoldMany(ctx, e, fmt.Sprintf("batch%d", n), n)
		if err != nil {
			return nil, err
		}
		var s sample
		op := RenewBatchOp(e, ts)
		if err := s.run(ctx, e, op, 1, 1, 0); err != nil { // warm-up
			return nil, err
		}
		s = sample{ready: s.ready}
		if err := s.run(ctx, e, op, sc.BatchTicks, sc.BatchTicks, 0); err != nil {
			return nil, err
		}
		st := stats(s.durs)
		rt := float64(s.counts.Total()) / float64(st.N)
		met := rt <= 5
		out = append(out, Result{
			Name: fmt.Sprintf("renew_batch_%d", n), NsPerOp: float64(st.Median), MeanNs: float64(st.Mean), P99Ns: float64(st.P99),
			RoundTripsPerOp: rt, Ops: st.N, Statements: breakdown(s.counts, float64(st.N)),
			Target: "<= 5 statements per tick", Met: &met,
			Metrics: map[string]float64{"leases": float64(n), "us_per_lease": float64(st.Median) / 1e3 / float64(n)},
			Note:    "one tick renews every lease; ns_per_op is per tick",
		})
	}
	return out, nil
}

// RenewBatchOp is one tick of RenewBatch over ts; any token refused is an
// error.
func RenewBatchOp(e *Env, ts []fence.Token) Op {
	return Op{Do: func(ctx context.Context) error {
		errs, err := e.Store.RenewBatch(ctx, ts, hour)
		if err != nil {
			return err
		}
		for i, err := range errs {
			if err != nil {
				return fmt.Errorf("lease %d: %w", i, err)
			}
		}
		return nil
	}}
}

// countObserver counts successful renewals.
type countObserver struct{ renewed atomic.Int64 }

func (o *countObserver) Observe(ctx context.Context, op fence.Op, lease string) (context.Context, func(fence.Event)) {
	if op != fence.OpRenew {
		return ctx, func(fence.Event) {}
	}
	return ctx, func(ev fence.Event) {
		if ev.Err == nil {
			o.renewed.Add(1)
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runnerCost: the steady state of RunnerLeases runners (fence.Run) whose
// jobs just wait: renewals per second per lease, round trips and this
// process's CPU per renewal.
func runnerCost(ctx context.Context, e *Env, sc ScaleConfig) ([]Result, error) {
	obs := &countObserver{}
	p, err := e.Peer(ctx, fence.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	defer p.Close()
	p.DB.SetMaxIdleConns(16)
	n, ttl := sc.RunnerLeases, sc.RunnerTTL
	every := ttl / 3
	// The process's CPU with nothing running, to subtract.
	idle0, it0 := cpuTime(), time.Now()
	time.Sleep(sc.RunnerWindow / 4)
	idlePerSec := float64(cpuTime()-idle0) / time.Since(it0).Seconds()

	stops := make([]chan struct{}, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var runErr error
	var notCompleted int
	for i := range n {
		stops[i] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the starts over one interval, as independent
			// processes would be.
			time.Sleep(time.Duration(i) * every / time.Duration(n))
			r, err := fence.Run(ctx, p.Store, fmt.Sprintf("runner-%d", i), func(ctx context.Context) error {
				select {
				case <-stops[i]:
				case <-ctx.Done():
				}
				return nil
			}, fence.WithTTL(ttl))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				runErr = errors.Join(runErr, err)
			} else if r.Outcome != fence.Completed {
				notCompleted++
			}
		}()
	}
	time.Sleep(every + every/2) // every runner started, and renewing
	r0, c0, cpu0, t0 := obs.renewed.Load(), p.Count.Snapshot(), cpuTime(), time.Now()
	time.Sleep(sc.RunnerWindow)
	r1, c1, cpu1, wall := obs.renewed.Load(), p.Count.Snapshot(), cpuTime(), time.Since(t0)
	// Stop them spread out too: a hundred completions at one instant is a
	// different experiment.
	for i := range n {
		close(stops[i])
		time.Sleep(every / time.Duration(n))
	}
	wg.Wait()
	if runErr != nil {
		return nil, runErr
	}
	renewals := float64(r1 - r0)
	if renewals == 0 {
		return nil, errors.New("no renewals in the window")
	}
	cpuPer := (float64(cpu1-cpu0) - idlePerSec*wall.Seconds()) / renewals
	perLease := renewals / wall.Seconds() / float64(n)
	// At the default TTL (30s, renewals every 10s) one lease costs this
	// share of a CPU.
	defaultShare := cpuPer / 1e9 / (fence.DefaultTTL / 3).Seconds()
	return []Result{{
		Name: "runner_steady_state", NsPerOp: cpuPer, RoundTripsPerOp: float64(c1.Sub(c0).Total()) / renewals,
		Ops: int(renewals), Statements: breakdown(c1.Sub(c0), renewals),
		Metrics: map[string]float64{
			"leases":                      float64(n),
			"ttl_s":                       ttl.Seconds(),
			"renewals_per_s_per_lease":    perLease,
			"expected_per_s_per_lease":    1 / every.Seconds(),
			"cpu_us_per_renewal":          cpuPer / 1e3,
			"cpu_percent_per_1000_leases": defaultShare * 1000 * 100,
			"idle_cpu_percent":            idlePerSec / 1e9 * 100,
			"runs_not_completed":          float64(notCompleted),
		},
		Note: "ns_per_op is this process's CPU (user+system, idle subtracted) per renewal; cpu_percent_per_1000_leases is for the default TTL of 30s",
	}}, nil
}

// handoffLatency: a holder releases while a waiter in another process (its
// own pool and sessions) sits in AcquireWait; the time from the release's
// return to the waiter holding the lease.
func handoffLatency(ctx context.Context, e *Env, sc ScaleConfig) ([]Result, error) {
	w, err := e.Peer(ctx)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	samples := sc.HandoffSamples
	// Without a wake-up the waiter polls every WithWaitBackoff max (2s):
	// release at a random point of that cycle. With one, any point will do.
	spread, base := 2*time.Second, 50*time.Millisecond
	if e.Dialect == fence.Postgres {
		spread, base = 100*time.Millisecond, 20*time.Millisecond
		if samples == 0 {
			samples = 50
		}
	}
	if samples == 0 {
		samples = 15
	}
	if sc.Quick {
		spread = 100 * time.Millisecond
	}
	var ds []time.Duration
	for range samples {
		l, err := e.Store.Acquire(ctx, "handoff", 30*time.Second)
		if err != nil {
			return nil, err
		}
		type got struct {
			at  time.Time
			l   fence.Lease
			err error
		}
		done := make(chan got, 1)
		go func() {
			wl, err := w.Store.AcquireWait(ctx, "handoff", 30*time.Second)
			done <- got{time.Now(), wl, err}
		}()
		time.Sleep(base + mrand.N(spread))
		if err := e.Store.Release(ctx, l.Token); err != nil {
			return nil, err
		}
		released := time.Now()
		g := <-done
		if g.err != nil {
			return nil, g.err
		}
		ds = append(ds, g.at.Sub(released))
		if err := w.Store.Release(ctx, g.l.Token); err != nil {
			return nil, err
		}
	}
	st := stats(ds)
	r := Result{
		Name: "handoff_release_to_held", NsPerOp: float64(st.Median), MeanNs: float64(st.Mean), P99Ns: float64(st.P99), Ops: st.N,
		Metrics: map[string]float64{"p50_ms": ms(st.Median), "p99_ms": ms(st.P99), "max_ms": ms(st.Max), "min_ms": ms(st.Min)},
		Note:    "from Release returning in the holder to AcquireWait returning in the waiter (another pool and session); ns_per_op is the median",
	}
	if e.Dialect == fence.Postgres {
		met := st.Median <= 20*time.Millisecond
		r.Target, r.Met = "p50 <= 20 ms", &met
	}
	return []Result{r}, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// crashTakeover: a holder acquires with CrashTTL and stops (no renewal, no
// release); a waiter in another process sits in AcquireWait. The time from
// the holder's acquire to the waiter holding, past the TTL.
func crashTakeover(ctx context.Context, e *Env, sc ScaleConfig) ([]Result, error) {
	w, err := e.Peer(ctx)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	var over []time.Duration
	for i := range sc.CrashSamples {
		name := fmt.Sprintf("crash-%d", i)
		if _, err := e.Store.Acquire(ctx, name, sc.CrashTTL); err != nil {
			return nil, err
		}
		t0 := time.Now()
		wl, err := w.Store.AcquireWait(ctx, name, time.Minute)
		if err != nil {
			return nil, err
		}
		over = append(over, time.Since(t0)-sc.CrashTTL)
		if err := w.Store.Release(ctx, wl.Token); err != nil {
			return nil, err
		}
	}
	st := stats(over)
	// The retry interval is the wait backoff's minimum (25ms), which also
	// bounds the jitter after a reported expiry; one round trip more is the
	// acquire itself.
	const retry = 25 * time.Millisecond
	met := st.Max <= retry+10*time.Millisecond
	return []Result{{
		Name: "takeover_after_crash", NsPerOp: float64(st.Median), MeanNs: float64(st.Mean), P99Ns: float64(st.P99), Ops: st.N,
		Target: fmt.Sprintf("<= TTL + %v retry interval (+10ms for the acquire)", retry), Met: &met,
		Metrics: map[string]float64{"ttl_ms": ms(sc.CrashTTL), "late_p50_ms": ms(st.Median), "late_max_ms": ms(st.Max), "late_min_ms": ms(st.Min)},
		Note:    "ns_per_op is how long after the TTL (counted from the holder's acquire returning) the waiter held the lease; negative: before, because the TTL starts at the database's commit",
	}}, nil
}
