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
// The scenarios run one after the other (in random order), each on names of
// its own, after every name was locked and unlocked once untimed (so that
// ShedLock's insert-once and fence's first upsert of a name are not timed).
func contended(ctx context.Context, e *bench.Env, ps []peer, shs *shareds, cfg Config) ([]Row, error) {
	type scenario struct {
		p      peer
		leases int
	}
	var todo []scenario
	for _, p := range ps {
		if !p.runsOn(e.Dialect) {
			continue
		}
		for _, n := range cfg.Leases {
			todo = append(todo, scenario{p, n})
		}
	}
	mrand.Shuffle(len(todo), func(a, b int) { todo[a], todo[b] = todo[b], todo[a] })
	e.DB.SetMaxIdleConns(2*cfg.Workers + 8)
	var out []Row
	for _, s := range todo {
		row := Row{Name: Contended, Peer: s.p.name, Dialect: string(e.Dialect), Durable: s.p.durable,
			Workers: cfg.Workers, Leases: s.leases, Note: s.p.note}
		if s.p.skip != "" {
			row.Note, row.Skipped = "", s.p.skip
			out = append(out, row)
			continue
		}
		sh, err := shs.get(ctx, e, s.p)
		if skip := skipped(err); skip != "" {
			row.Skipped = skip
			out = append(out, row)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("peers: %s: %w", s.p.name, err)
		}
		fmt.Fprintf(cfg.Bench.Log, "peers: %s: contended %s, %d workers on %d leases\n", e.Dialect, s.p.name, cfg.Workers, s.leases)
		if err := contendOne(ctx, e, s.p, sh, s.leases, cfg, &row); err != nil {
			return nil, fmt.Errorf("peers: contended %s on %d leases: %w", s.p.name, s.leases, err)
		}
		out = append(out, row)
	}
	// Throughput next to fence's in the same scenario.
	fenceRate := map[int]float64{}
	for _, r := range out {
		if r.Peer == Fence {
			fenceRate[r.Leases] = r.AcquisitionsPerS
		}
	}
	for i := range out {
		if f := fenceRate[out[i].Leases]; f > 0 && out[i].Skipped == "" {
			out[i].ThroughputToFence = out[i].AcquisitionsPerS / f
		}
	}
	slices.SortStableFunc(out, func(a, b Row) int {
		if a.Leases != b.Leases {
			return a.Leases - b.Leases
		}
		return 0
	})
	return out, nil
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
