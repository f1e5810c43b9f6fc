// Package peers measures fence next to the leases and locks people use
// instead, in one process, interleaved with fence's own cases (in random
// order in every round, by internal/bench's engine): a ShedLock-shaped
// lease, River's leader election SQL on a logged and on an unlogged table,
// and as the non-durable floor PostgreSQL advisory locks, MySQL GET_LOCK
// and a Redis SET NX PX lock; then the contended scenario (16 workers on 1
// and on 1,000 leases).
//
// It is a module of its own so that the Redis client (and any other peer's
// dependency) stays out of fence's module: `fence bench --peers` runs the
// command cmd/fence-bench-peers built from here. Every peer statement is
// written here from the peer's documented shape (queries/), not taken from
// the peer's code.
package peers

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/bench"
)

// Operation names of a row.
const (
	AcquireRelease = "acquire_release"
	Renew          = "renew"
	Refused        = "refused"
	Contended      = "contended"
)

// Fence is the peer name of fence itself.
const Fence = "fence"

// peer is one contender.
type peer struct {
	name    string
	durable bool
	// dialects limits the peer to some databases (nil: every one).
	dialects []fence.Dialect
	// skip, when set, is why the peer cannot run at all.
	skip string
	note string
	// shared sets up what the peer's clients share (tables, statements, a
	// Redis client); nil needs nothing.
	shared func(ctx context.Context, e *bench.Env) (any, error)
	// client makes one client (one holder identity).
	client func(ctx context.Context, e *bench.Env, shared any) (locker, error)
}

func (p peer) runsOn(d fence.Dialect) bool {
	if p.dialects == nil {
		return true
	}
	for _, x := range p.dialects {
		if x == d {
			return true
		}
	}
	return false
}

// PglockNote is what could not be run of pglock, and why.
const PglockNote = "not run: the Go module proxy refused cirello.io/pglock (403 Forbidden, \"This module version is not available\", asked once on 2026-12-04); its statements were not rewritten by hand"

func peersFor(redisAddr string) []peer {
	pg := []fence.Dialect{fence.Postgres}
	return []peer{
		{name: Fence, durable: true, client: newFence,
			note: "fenced, durable, not bound to a session"},
		{name: "shedlock", durable: true, shared: newShedLockShared, client: newShedLock,
			note: "ShedLock-shaped (usingDbTime): single-table UPDATE when lock_until has passed, INSERT once per name; no fence token"},
		{name: "river_logged", durable: true, dialects: pg, shared: newRiverShared(false), client: newRiver,
			note: "River's leader election SQL on a logged river_leader: BEGIN, DELETE expired, INSERT … ON CONFLICT, COMMIT; resign deletes and notifies; no fence token"},
		{name: "river_unlogged", durable: false, dialects: pg, shared: newRiverShared(true), client: newRiver,
			note: "River's leader election SQL on an UNLOGGED river_leader, as River creates it: emptied by a crash"},
		{name: "fence_plain_update", durable: true, dialects: []fence.Dialect{fence.Postgres, fence.MySQL}, shared: newVariantShared, client: newVariant,
			note: "measurement only, not fence's code: fence's lease table driven by plain single-table UPDATEs (issue 17 §3's proposed hot path; on PostgreSQL renew and release without fence's lock-first CTE and release without the waiter notification; on MariaDB only the acquire differs, renew and release are fence's own)"},
		{name: "pglock", durable: true, dialects: pg, skip: PglockNote},
		{name: "pg_advisory", durable: false, dialects: pg, client: newSession,
			note: "pg_try_advisory_lock on a pinned connection: no row, no fence token, gone with the session"},
		{name: "mysql_get_lock", durable: false, dialects: []fence.Dialect{fence.MySQL}, client: newSession,
			note: "GET_LOCK(name, 0) on a pinned connection: no row, no fence token, gone with the connection"},
		{name: "redis", durable: false, shared: newRedisShared(redisAddr), client: newRedis,
			note: "SET NX PX, compare-and-delete, compare-and-pexpire (Lua): not durable without fsync'd AOF, a second system, no fence token"},
	}
}

// Config says what to run and for how long.
type Config struct {
	// Bench is the engine's configuration of the per-operation cases.
	Bench bench.Config
	// Redis is the Redis address; "" leaves the Redis lock out.
	Redis string
	// Workers and Leases are the contended scenario's shape (default 16
	// workers, 1 and 1,000 leases), each run for Contended (default 2s; 0
	// with NoContended leaves the scenario out).
	Workers     int
	Leases      []int
	Contended   time.Duration
	NoContended bool
	// ContendedRounds runs every contended scenario that many times
	// (default 3), all of them in a new random order each round, and
	// reports the median: one 2-second run on a shared machine varies by
	// 20-30 %, more than the differences it is meant to show.
	ContendedRounds int
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if len(c.Leases) == 0 {
		c.Leases = []int{1, 1000}
	}
	if c.Contended <= 0 {
		c.Contended = 2 * time.Second
	}
	if c.ContendedRounds <= 0 {
		c.ContendedRounds = 3
	}
	if c.Bench.Log == nil {
		c.Bench.Log = io.Discard
	}
}

// Row is one line of the peers table (and one object of --json): an
// operation of a peer, the contended scenario of a peer, or the load
// average of the run.
type Row struct {
	Name    string `json:"name"`
	Peer    string `json:"peer"`
	Dialect string `json:"dialect"`
	// NsPerOp is the median time of one operation, RoundTripsPerOp the mean
	// number of calls that reached the database (or Redis) per operation,
	// and RatioToFence NsPerOp over fence's of the same operation in the
	// same run.
	NsPerOp         float64 `json:"ns_per_op"`
	RoundTripsPerOp float64 `json:"round_trips_per_op"`
	RatioToFence    float64 `json:"ratio_to_fence"`
	// Durable says whether the lock survives a crash of the database.
	Durable bool `json:"durable"`

	Ops        int     `json:"ops,omitempty"`
	P99Ns      float64 `json:"p99_ns,omitempty"`
	Statements string  `json:"statements,omitempty"`

	// The contended scenario: Workers clients on Leases names, each in a
	// loop trying to lock a random name and unlocking it at once when it
	// got it, for Seconds.
	Workers          int     `json:"workers,omitempty"`
	Leases           int     `json:"leases,omitempty"`
	Seconds          float64 `json:"seconds,omitempty"`
	AcquisitionsPerS float64 `json:"acquisitions_per_s,omitempty"`
	// ThroughputToFence is AcquisitionsPerS over fence's in the same
	// scenario and round.
	ThroughputToFence float64 `json:"throughput_to_fence,omitempty"`
	RefusalsPerS      float64 `json:"refusals_per_s,omitempty"`
	RefusalP50Ns      float64 `json:"refusal_p50_ns,omitempty"`
	RefusalP99Ns      float64 `json:"refusal_p99_ns,omitempty"`
	// Rounds is how many times the scenario ran. AcquisitionsPerS,
	// ThroughputToFence and the refusal percentiles are then the medians
	// over the rounds (each ratio taken within its round, against fence's
	// run of that round); the Runs lists hold every round's value in the
	// order they ran, and Seconds and Ops are the rounds' sums.
	Rounds                int       `json:"rounds,omitempty"`
	AcquisitionsPerSRuns  []float64 `json:"acquisitions_per_s_runs,omitempty"`
	ThroughputToFenceRuns []float64 `json:"throughput_to_fence_runs,omitempty"`

	Metrics map[string]float64 `json:"metrics,omitempty"`
	Note    string             `json:"note,omitempty"`
	Skipped string             `json:"skipped,omitempty"`
}

// caseName is the engine's name of a peer's operation.
func caseName(peer, op string) string { return peer + "/" + op }

// cases makes the engine's cases of every peer that runs on e: for each,
// acquire_release (lock a free name, unlock it), renew (extend a held
// lock) and refused (try a name another client holds).
func cases(e *bench.Env, ps []peer, sh *shareds) []bench.Case {
	var out []bench.Case
	for _, p := range ps {
		p := p
		if !p.runsOn(e.Dialect) {
			continue
		}
		client := func(ctx context.Context) (locker, error) {
			shared, err := sh.get(ctx, e, p)
			if err != nil {
				return nil, err
			}
			return p.client(ctx, e, shared)
		}
		dialects := []fence.Dialect{e.Dialect}
		out = append(out,
			bench.Case{Name: caseName(p.name, AcquireRelease), Dialects: dialects, Setup: func(ctx context.Context, e *bench.Env) (bench.Op, error) {
				c, err := client(ctx)
				if err != nil {
					return bench.Op{}, err
				}
				name := "p-cycle-" + p.name
				return bench.Op{Do: func(ctx context.Context) error {
					ok, err := c.tryLock(ctx, name)
					if err != nil {
						return err
					}
					if !ok {
						return fmt.Errorf("peers: %s: %s is held", p.name, name)
					}
					return c.unlock(ctx, name)
				}, Close: c.close}, nil
			}},
			bench.Case{Name: caseName(p.name, Renew), Dialects: dialects, Setup: func(ctx context.Context, e *bench.Env) (bench.Op, error) {
				c, err := client(ctx)
				if err != nil {
					return bench.Op{}, err
				}
				name := "p-renew-" + p.name
				if _, ok := c.(sessionBound); ok {
					c.close()
					return bench.Op{}, fmt.Errorf("%w: %v", bench.ErrSkip, errNoRenew)
				}
				if ok, err := c.tryLock(ctx, name); err != nil || !ok {
					c.close()
					return bench.Op{}, fmt.Errorf("peers: %s: lock %s to renew it: %v (got it: %v)", p.name, name, err, ok)
				}
				return bench.Op{Do: func(ctx context.Context) error {
					ok, err := c.renew(ctx, name)
					if err == nil && !ok {
						err = fmt.Errorf("peers: %s: renew of %s: not held", p.name, name)
					}
					return err
				}, Close: func() { c.unlock(context.Background(), name); c.close() }}, nil
			}},
			bench.Case{Name: caseName(p.name, Refused), Dialects: dialects, Setup: func(ctx context.Context, e *bench.Env) (bench.Op, error) {
				holder, err := client(ctx)
				if err != nil {
					return bench.Op{}, err
				}
				name := "p-held-" + p.name
				if ok, err := holder.tryLock(ctx, name); err != nil || !ok {
					holder.close()
					return bench.Op{}, fmt.Errorf("peers: %s: lock %s: %v (got it: %v)", p.name, name, err, ok)
				}
				c, err := client(ctx)
				if err != nil {
					holder.close()
					return bench.Op{}, err
				}
				return bench.Op{Do: func(ctx context.Context) error {
					ok, err := c.tryLock(ctx, name)
					if err == nil && ok {
						err = fmt.Errorf("peers: %s: locked %s, which another client holds", p.name, name)
					}
					return err
				}, Close: func() {
					holder.unlock(context.Background(), name)
					holder.close()
					c.close()
				}}, nil
			}},
		)
	}
	return out
}

// Run opens dsn and measures fence and its peers on it: the operations
// interleaved in one engine run, then the contended scenarios one after the
// other in random order.
func Run(ctx context.Context, dsn string, cfg Config) ([]Row, error) {
	cfg.defaults()
	e, err := bench.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	sh := &shareds{m: map[string]any{}, errs: map[string]error{}}
	defer sh.close()
	log := cfg.Bench.Log
	l0, err0 := bench.ReadLoadAverage()
	fmt.Fprintf(log, "peers: %s (%s), load average %s\n", e.Redacted, e.Dialect, l0)
	ps := peersFor(cfg.Redis)
	rs, err := bench.RunCases(ctx, e, cases(e, ps, sh), cfg.Bench)
	if err != nil {
		return nil, err
	}
	rows := opRows(e.Dialect, ps, rs)
	if !cfg.NoContended {
		more, err := contended(ctx, e, ps, sh, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, more...)
	}
	l1, err1 := bench.ReadLoadAverage()
	fmt.Fprintf(log, "peers: %s: load average %s at the end\n", e.Dialect, l1)
	lr := bench.LoadResult(string(e.Dialect), l0, l1, err0, err1)
	rows = append(rows, Row{Name: lr.Name, Dialect: lr.Dialect, Metrics: lr.Metrics, Note: lr.Note, Skipped: lr.Skipped})
	return rows, nil
}

func opRows(d fence.Dialect, ps []peer, rs []bench.Result) []Row {
	byPeer := map[string]peer{}
	for _, p := range ps {
		byPeer[p.name] = p
	}
	fenceNs := map[string]float64{}
	for _, r := range rs {
		pn, op, _ := strings.Cut(r.Name, "/")
		if pn == Fence && r.Skipped == "" {
			fenceNs[op] = r.NsPerOp
		}
	}
	var rows []Row
	for _, r := range rs {
		pn, op, _ := strings.Cut(r.Name, "/")
		p := byPeer[pn]
		row := Row{Name: op, Peer: pn, Dialect: string(d), Durable: p.durable, Note: p.note, Skipped: r.Skipped}
		if r.Skipped == "" {
			row.NsPerOp, row.RoundTripsPerOp, row.Ops, row.P99Ns, row.Statements = r.NsPerOp, r.RoundTripsPerOp, r.Ops, r.P99Ns, r.Statements
			if f := fenceNs[op]; f > 0 {
				row.RatioToFence = r.NsPerOp / f
			}
		}
		if p.skip != "" {
			row.Note, row.Skipped = "", p.skip
		}
		rows = append(rows, row)
	}
	return rows
}

// shareds holds what each peer's clients share (set up once per run, for
// the operations and the contended scenario alike).
type shareds struct {
	m       map[string]any
	errs    map[string]error
	closers []io.Closer
}

func (s *shareds) get(ctx context.Context, e *bench.Env, p peer) (any, error) {
	if p.skip != "" {
		return nil, fmt.Errorf("%w: %s", bench.ErrSkip, p.skip)
	}
	if v, ok := s.m[p.name]; ok {
		return v, s.errs[p.name]
	}
	var v any
	var err error
	if p.shared != nil {
		v, err = p.shared(ctx, e)
	}
	s.m[p.name], s.errs[p.name] = v, err
	if c, ok := v.(io.Closer); ok && err == nil {
		s.closers = append(s.closers, c)
	}
	return v, err
}

func (s *shareds) close() {
	for _, c := range s.closers {
		c.Close()
	}
}
