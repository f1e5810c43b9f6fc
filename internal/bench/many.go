package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fence"
)

// manyNames: Names lease names and W workers (W in Workers) competing for
// them, each in a loop: pick a name at random, fence.Run a job that makes
// one fenced write to that name's row. Completed runs per second, and what
// the database's own lock views saw meanwhile (sampled every 50ms): lock
// waits and deadlocks.
func manyNames(ctx context.Context, e *Env, sc ScaleConfig) ([]Result, error) {
	items, err := e.createItems(ctx, "many_items", sc.Names)
	if err != nil {
		return nil, err
	}
	q := e.Rebind(fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = ? AND {{fence}}", items))
	var out []Result
	for _, workers := range sc.Workers {
		p, err := e.Peer(ctx)
		if err != nil {
			return nil, err
		}
		p.DB.SetMaxIdleConns(workers + 4)
		r, err := manyRound(ctx, e, p, q, sc, workers)
		p.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if len(out) > 0 && out[0].Metrics["runs_per_s"] > 0 {
		for i := range out {
			out[i].Metrics["speedup_vs_1"] = out[i].Metrics["runs_per_s"] / out[0].Metrics["runs_per_s"]
		}
	}
	return out, nil
}

func manyRound(ctx context.Context, e, p *Env, q string, sc ScaleConfig, workers int) (Result, error) {
	lv := newLockView(e)
	d0, err := lv.deadlocks(ctx)
	if err != nil {
		return Result{}, err
	}
	var completed, held, failed atomic.Int64
	var firstErr atomic.Value
	c0 := p.Count.Snapshot()
	stop := time.Now().Add(sc.ManyDuration)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				id := mrand.IntN(sc.Names) + 1
				r, err := fence.Run(ctx, p.Store, fmt.Sprintf("many-%d", id), func(ctx context.Context) error {
					t, _ := fence.TokenFrom(ctx)
					_, err := p.Store.Exec(ctx, t, q, id)
					return err
				})
				switch {
				case err == nil && r.Outcome == fence.Completed:
					completed.Add(1)
				case err == nil && r.Outcome == fence.NotAcquired && errors.Is(r.Err, fence.ErrHeld):
					held.Add(1)
				default:
					failed.Add(1)
					if err == nil {
						err = fmt.Errorf("%s: %v (job: %v)", r.Outcome, r.Err, r.JobErr)
					}
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	done := make(chan struct{})
	var maxWaits int64
	var sampleErr error
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for time.Now().Before(stop) {
			<-t.C
			n, err := lv.waits(ctx)
			if err != nil {
				sampleErr = err
				return
			}
			maxWaits = max(maxWaits, n)
		}
	}()
	start := time.Now()
	wg.Wait()
	wall := time.Since(start)
	<-done
	if sampleErr != nil {
		return Result{}, fmt.Errorf("lock view: %w", sampleErr)
	}
	d1, err := lv.deadlocks(ctx)
	if err != nil {
		return Result{}, err
	}
	n := completed.Load()
	rps := float64(n) / wall.Seconds()
	c := p.Count.Snapshot().Sub(c0)
	r := Result{
		Name: fmt.Sprintf("many_names_%dw", workers), Ops: int(n),
		Metrics: map[string]float64{
			"workers": float64(workers), "names": float64(sc.Names), "runs_per_s": rps,
			"not_acquired": float64(held.Load()), "failed": float64(failed.Load()),
			"max_lock_waits_seen": float64(maxWaits), "deadlocks": float64(d1 - d0),
		},
		Note: "a completed run is fence.Run: acquire, start run, one fenced write, fenced completion, release; lock waits are sampled every 50ms from " + lv.what,
	}
	if n > 0 {
		r.NsPerOp = float64(wall.Nanoseconds()) / float64(n)
		r.RoundTripsPerOp = float64(c.RoundTrips()) / float64(n)
		r.Statements = breakdown(c, float64(n))
	}
	if t := lv.seen(); t != "" {
		r.Note += "; lock types seen waiting: " + t
	}
	if s, ok := firstErr.Load().(string); ok {
		r.Note += "; first failure: " + s
	}
	ok := failed.Load() == 0 && d1 == d0
	r.Target, r.Met = "no failures, no deadlocks", &ok
	return r, nil
}

// lockView reads the database's own view of lock waits and deadlocks,
// restricted to the bench's tables where the view allows.
type lockView struct {
	e    *Env
	what string

	mu    sync.Mutex
	types map[string]bool // PostgreSQL: lock types seen waiting
}

func newLockView(e *Env) *lockView {
	v := &lockView{e: e, types: map[string]bool{}}
	switch e.Dialect {
	case fence.Postgres:
		v.what = "pg_locks (not granted, on the bench's sessions' queries) and pg_stat_database.deadlocks"
	case fence.MySQL:
		v.what = "information_schema.INNODB_TRX (LOCK WAIT on the bench's tables) and Innodb_deadlocks"
	default:
		v.what = "nowhere: SQLite has no lock view; a busy database shows as failed runs (SQLITE_BUSY)"
	}
	return v
}

func (v *lockView) seen() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return strings.Join(slices.Sorted(maps.Keys(v.types)), " ")
}

func (v *lockView) waits(ctx context.Context) (int64, error) {
	var n int64
	like := "%" + v.e.prefix + "%"
	switch v.e.Dialect {
	case fence.Postgres:
		var types string
		err := v.e.DB.QueryRowContext(ctx, `SELECT count(*), coalesce(string_agg(DISTINCT l.locktype, ','), '')
			FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND a.query LIKE $1`, like).Scan(&n, &types)
		if types != "" {
			v.mu.Lock()
			v.types[types] = true
			v.mu.Unlock()
		}
		return n, err
	case fence.MySQL:
		err := v.e.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.INNODB_TRX
			WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?`, like).Scan(&n)
		return n, err
	}
	return 0, nil
}

// deadlocks is the server's deadlock counter (PostgreSQL: of this
// database; MariaDB/MySQL: of the server, so other clients count too).
func (v *lockView) deadlocks(ctx context.Context) (int64, error) {
	switch v.e.Dialect {
	case fence.Postgres:
		var n int64
		err := v.e.DB.QueryRowContext(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
		return n, err
	case fence.MySQL:
		var name string
		var n int64
		err := v.e.DB.QueryRowContext(ctx, `SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'`).Scan(&name, &n)
		if errors.Is(err, sql.ErrNoRows) {
			// MySQL 8 keeps it in INNODB_METRICS.
			err = v.e.DB.QueryRowContext(ctx, `SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'lock_deadlocks'`).Scan(&n)
		}
		return n, err
	}
	return 0, nil
}
