package peers

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fence/internal/bench"
)

// contended runs, for every peer and every number of leases, Workers
// clients that each loop for cfg.Contended: pick a name at random, try to
// lock it, and unlock it at once when they got it. An acquisition is a lock
// and its unlock; a refusal is a try that found the name held, timed alone.
// Every scenario runs cfg.ContendedRounds times; each round runs all of
// them one after the other in a new random order, so that a slow stretch of
// the machine falls on different peers in different rounds. Each run works
// on names of its own, after every name was locked and unlocked once
// untimed (so that ShedLock's insert-once and fence's first upsert of a
// name are not timed).
func contended(ctx context.Context, e *bench.Env, ps []peer, shs *shareds, cfg Config) ([]Row, error) {
	type scenario struct {
		p      peer
		leases int
		order  int // the peer's place in ps, for a stable output order
	}
	var todo []scenario
	var out []Row
	for i, p := range ps {
		if !p.runsOn(e.Dialect) {
			continue
		}
		for _, n := range cfg.Leases {
			if p.skip != "" {
				out = append(out, Row{Name: Contended, Peer: p.name, Dialect: string(e.Dialect), Durable: p.durable,
					Workers: cfg.Workers, Leases: n, Skipped: p.skip})
				continue
			}
			todo = append(todo, scenario{p, n, i})
		}
	}
	e.DB.SetMaxIdleConns(2*cfg.Workers + 8)
	type key struct {
		peer   string
		leases int
	}
	runs := map[key][]Row{}
	skippedRow := map[key]Row{}
	for round := 0; round < cfg.ContendedRounds; round++ {
		mrand.Shuffle(len(todo), func(a, b int) { todo[a], todo[b] = todo[b], todo[a] })
		for _, s := range todo {
			k := key{s.p.name, s.leases}
			if _, ok := skippedRow[k]; ok {
				continue
			}
			row := Row{Name: Contended, Peer: s.p.name, Dialect: string(e.Dialect), Durable: s.p.durable,
				Workers: cfg.Workers, Leases: s.leases, Note: s.p.note}
			sh, err := shs.get(ctx, e, s.p)
			if skip := skipped(err); skip != "" {
				row.Note, row.Skipped = "", skip
				skippedRow[k] = row
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("peers: %s: %w", s.p.name, err)
			}
			fmt.Fprintf(cfg.Bench.Log, "peers: %s: contended %s, %d workers on %d leases (round %d of %d)\n",
				e.Dialect, s.p.name, cfg.Workers, s.leases, round+1, cfg.ContendedRounds)
			if err := contendOne(ctx, e, s.p, sh, s.leases, cfg, &row); err != nil {
				return nil, fmt.Errorf("peers: contended %s on %d leases: %w", s.p.name, s.leases, err)
			}
			runs[k] = append(runs[k], row)
		}
	}
	// Each round's throughput next to fence's in the same round.
	for k, rs := range runs {
		fs := runs[key{Fence, k.leases}]
		for i := range rs {
			if i < len(fs) && fs[i].AcquisitionsPerS > 0 {
				rs[i].ThroughputToFence = rs[i].AcquisitionsPerS / fs[i].AcquisitionsPerS
			}
		}
	}
	slices.SortStableFunc(todo, func(a, b scenario) int {
		if a.leases != b.leases {
			return a.leases - b.leases
		}
		return a.order - b.order
	})
	for _, s := range todo {
		k := key{s.p.name, s.leases}
		if r, ok := skippedRow[k]; ok {
			out = append(out, r)
			continue
		}
		out = append(out, merge(runs[k]))
	}
	slices.SortStableFunc(out, func(a, b Row) int { return a.Leases - b.Leases })
	return out, nil
}

// merge makes one row of a scenario's rounds: the medians of the rates,
// ratios and refusal percentiles, every round's rate and ratio, and the
// sums of time, operations and round trips.
func merge(rs []Row) Row {
	out := rs[0]
	var acq, ratio, p50, p99, refusals []float64
	var trips float64
	out.Seconds, out.Ops = 0, 0
	for _, r := range rs {
		acq = append(acq, r.AcquisitionsPerS)
		refusals = append(refusals, r.RefusalsPerS)
		if r.ThroughputToFence > 0 {
			ratio = append(ratio, r.ThroughputToFence)
		}
		if r.RefusalP50Ns > 0 {
			p50 = append(p50, r.RefusalP50Ns)
			p99 = append(p99, r.RefusalP99Ns)
		}
		out.Seconds += r.Seconds
		out.Ops += r.Ops
		trips += r.RoundTripsPerOp * float64(r.Ops)
	}
	out.Rounds = len(rs)
	out.AcquisitionsPerSRuns = slices.Clone(acq)
	out.ThroughputToFenceRuns = slices.Clone(ratio)
	out.AcquisitionsPerS = median(acq)
	out.RefusalsPerS = median(refusals)
	out.ThroughputToFence = median(ratio)
	out.RefusalP50Ns, out.RefusalP99Ns = median(p50), median(p99)
	if out.Ops > 0 {
		out.RoundTripsPerOp = trips / float64(out.Ops)
	}
	return out
}

// median is the middle value (the mean of the two middle ones for an even
// count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func skipped(err error) string {
	if errors.Is(err, bench.ErrSkip) {
		return err.Error()
	}
	return ""
}

func contendOne(ctx context.Context, e *bench.Env, p peer, sh any, leases int, cfg Config, row *Row) error {
	names := make([]string, leases)
	tag := randomID()[:6]
	for i := range names {
		names[i] = fmt.Sprintf("c%s-%d", tag, i)
	}
	clients := make([]locker, cfg.Workers)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.close()
			}
		}
	}()
	for i := range clients {
		c, err := p.client(ctx, e, sh)
		if err != nil {
			return err
		}
		clients[i] = c
	}
	// Every name once, untimed, spread over the workers.
	var next atomic.Int64
	if err := each(clients, func(c locker) error {
		for {
			i := int(next.Add(1)) - 1
			if i >= len(names) {
				return nil
			}
			ok, err := c.tryLock(ctx, names[i])
			if err != nil {
				return err
			}
			if ok {
				if err := c.unlock(ctx, names[i]); err != nil {
					return err
				}
			}
		}
	}); err != nil {
		return fmt.Errorf("first lock of every name: %w", err)
	}
	var acquired atomic.Int64
	refusals := make([][]time.Duration, len(clients))
	c0 := e.Count.Snapshot()
	start := time.Now()
	stop := start.Add(cfg.Contended)
	var mu sync.Mutex
	idx := 0
	err := each(clients, func(c locker) error {
		mu.Lock()
		me := idx
		idx++
		mu.Unlock()
		for time.Now().Before(stop) {
			if err := ctx.Err(); err != nil {
				return err
			}
			name := names[mrand.IntN(len(names))]
			t0 := time.Now()
			ok, err := c.tryLock(ctx, name)
			d := time.Since(t0)
			if err != nil {
				return err
			}
			if !ok {
				refusals[me] = append(refusals[me], d)
				continue
			}
			if err := c.unlock(ctx, name); err != nil {
				return err
			}
			acquired.Add(1)
		}
		return nil
	})
	wall := time.Since(start)
	if err != nil {
		return err
	}
	all := slices.Concat(refusals...)
	slices.Sort(all)
	n := acquired.Load()
	row.Seconds = wall.Seconds()
	row.AcquisitionsPerS = float64(n) / wall.Seconds()
	row.RefusalsPerS = float64(len(all)) / wall.Seconds()
	row.Ops = int(n) + len(all)
	if len(all) > 0 {
		row.RefusalP50Ns = float64(all[len(all)/2].Nanoseconds())
		row.RefusalP99Ns = float64(all[min(len(all)-1, len(all)*99/100)].Nanoseconds())
	}
	if row.Ops > 0 {
		row.RoundTripsPerOp = float64(e.Count.Snapshot().Sub(c0).RoundTrips()) / float64(row.Ops)
	}
	return nil
}

// each runs f once per client, concurrently, and returns the first error.
func each(clients []locker, f func(locker) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
