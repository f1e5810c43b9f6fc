package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Op is one benchmarked operation.
type Op struct {
	// Prepare, when set, runs before each Do, untimed and uncounted (it
	// puts the lease back into the state Do starts from).
	Prepare func(ctx context.Context) error
	// Do is the operation measured.
	Do func(ctx context.Context) error
	// Close, when set, releases what Setup took.
	Close func()
}

// sample accumulates the measured runs of one Op.
type sample struct {
	durs   []time.Duration
	counts Counts
	// ready says that op's Prepare has run since its last Do.
	ready bool
}

// run runs op n times, or until budget is spent (but at least min times),
// timing and counting Do alone.
//
// Prepare runs right after each Do (and before the first, unless ready),
// not right before the next: with one operation per turn the Do that
// follows is then preceded, like a case without Prepare, by whatever case
// ran before it. Run right before, Prepare's durable commit (acquire's
// release, release's acquire) always preceded Do, and a commit right after
// a commit is cheaper than one after a read: 1% in one process (floor
// UPDATE after an UPDATE 253µs, after any case 256µs, after SELECT 1
// 269µs; acquire 278µs prepared before, 280µs prepared after), which
// flattered acquire and release against the floor.
//
// Prepare and Do get ctx without its cancellation (opCtx); ctx is checked
// between operations instead, so an interrupt still stops the run.
func (s *sample) run(ctx context.Context, e *Env, op Op, n, minN int, budget time.Duration) error {
	start := time.Now()
	octx := opCtx(ctx)
	prepare := func() error {
		if op.Prepare == nil || s.ready {
			return nil
		}
		if err := op.Prepare(octx); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		s.ready = true
		return nil
	}
	for i := 0; i < n && (i < minN || time.Since(start) < budget); i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := prepare(); err != nil {
			return err
		}
		s.ready = false
		c0 := e.Count.Snapshot()
		t0 := time.Now()
		err := op.Do(octx)
		d := time.Since(t0)
		c1 := e.Count.Snapshot()
		if err != nil {
			return err
		}
		s.durs = append(s.durs, d)
		s.counts = addCounts(s.counts, c1.Sub(c0))
		if err := prepare(); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// opCtx is the context the operations run with: ctx's values without its
// cancellation, so that its Done channel is nil. database/sql starts a
// goroutine for every query whose context can be cancelled (Rows.awaitDone,
// to close the rows when it is) and none for an Exec; on a 2-vCPU machine
// that goroutine cost a query 10-20µs (renew 288 -> 301µs, acquire 281 ->
// 295µs, floor_update's Exec 258 -> 260µs; interleaved in one process).
// With fence bench's interruptible context every case that reads a row
// back paid it and the floor UPDATE did not: renew and acquire showed ~5
// points more over the floor than the same statements with
// context.Background(), as `go test -bench` and direct measurements run
// them. The case renew_cancel_ctx shows that cost on its own.
func opCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

func addCounts(a, b Counts) Counts {
	return Counts{
		Exec: a.Exec + b.Exec, Query: a.Query + b.Query, Prepare: a.Prepare + b.Prepare,
		Begin: a.Begin + b.Begin, Commit: a.Commit + b.Commit, Rollback: a.Rollback + b.Rollback,
		Ping: a.Ping + b.Ping, Batch: a.Batch + b.Batch, Net: a.Net + b.Net,
	}
}

// Stats summarises durations.
type Stats struct {
	N                 int
	Median, Mean, P99 time.Duration
	Min, Max, P90     time.Duration
}

func stats(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return Stats{
		N: len(s), Median: q(0.5), Mean: sum / time.Duration(len(s)), P99: q(0.99),
		Min: s[0], Max: s[len(s)-1], P90: q(0.9),
	}
}
