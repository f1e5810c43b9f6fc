package fence_test

// The benchmarks of docs/BENCHMARKS.md, as go test benchmarks, on each
// database the tests reach (SQLite in a temp dir; PostgreSQL and MariaDB
// from FENCE_TEST_POSTGRES / FENCE_TEST_MYSQL, else the local defaults):
//
//	go test -run '^$' -bench . -benchtime 2s .
//
// Every operation reports roundtrips/op next to ns/op, counted by a wrapper
// around the driver's connections (internal/bench). The ratios to the
// baselines (floor_update, select_1, the unfenced write and transaction)
// are what `fence bench` prints, measured interleaved in one run; here each
// sub-benchmark runs on its own, so compare ns/op within one go test run.

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/bench"
	"github.com/fencekit/fence/internal/testdb"
)

type benchDB struct {
	name, env string
	dsn       func(b *testing.B) string
}

var benchDBs = []benchDB{
	{"sqlite", "", func(b *testing.B) string { return "sqlite:" + filepath.Join(b.TempDir(), "bench.db") }},
	{"postgres", "FENCE_TEST_POSTGRES", func(*testing.B) string { return testdb.PostgresDSN() }},
	{"mysql", "FENCE_TEST_MYSQL", func(*testing.B) string { return testdb.MySQLDSN() }},
}

func openBench(b *testing.B, db benchDB) *bench.Env {
	b.Helper()
	e, err := bench.Open(context.Background(), db.dsn(b))
	if errors.Is(err, fence.ErrUnavailable) {
		testdb.Unreachable(b, db.name, db.env, err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// BenchmarkLease: every lease operation, the fenced writes, their baselines
// and the alternatives (advisory locks, GET_LOCK; the Redis lock is in
// fence-bench-peers, internal/bench/peers).
func BenchmarkLease(b *testing.B) {
	for _, db := range benchDBs {
		b.Run(db.name, func(b *testing.B) {
			e := openBench(b, db)
			for _, c := range append(bench.Cases(), bench.Alternatives()...) {
				if !c.RunsOn(e.Dialect) {
					continue
				}
				b.Run(c.Name, func(b *testing.B) { runCase(b, e, c) })
			}
		})
	}
}

func runCase(b *testing.B, e *bench.Env, c bench.Case) {
	ctx := context.Background()
	op, err := c.Setup(ctx, e)
	if errors.Is(err, bench.ErrSkip) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	if op.Close != nil {
		defer op.Close()
	}
	var rt int64
	for b.Loop() {
		if op.Prepare != nil {
			b.StopTimer()
			if err := op.Prepare(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		c0 := e.Count.Snapshot()
		if err := op.Do(ctx); err != nil {
			b.Fatal(err)
		}
		rt += e.Count.Snapshot().Sub(c0).Total()
	}
	b.ReportMetric(float64(rt)/float64(b.N), "roundtrips/op")
}

// BenchmarkRenewBatch: one RenewBatch tick over 1, 100 and 10,000 held
// leases (target: at most 5 statements per tick).
func BenchmarkRenewBatch(b *testing.B) {
	for _, db := range benchDBs {
		b.Run(db.name, func(b *testing.B) {
			e := openBench(b, db)
			for _, n := range []int{1, 100, 10_000} {
				b.Run(strconv.Itoa(n), func(b *testing.B) {
					ts, err := bench.HoldMany(context.Background(), e, "batch"+strconv.Itoa(n), n)
					if err != nil {
						b.Fatal(err)
					}
					runCase(b, e, bench.Case{Setup: func(context.Context, *bench.Env) (bench.Op, error) {
						return bench.RenewBatchOp(e, ts), nil
					}})
				})
			}
		})
	}
}

// BenchmarkScale runs the scale experiments once per iteration, in their
// quick form (so that -benchtime 1x keeps them from rotting); `fence bench
// --scale` runs them in full. Their numbers are reported as metrics.
func BenchmarkScale(b *testing.B) {
	for _, db := range benchDBs {
		b.Run(db.name, func(b *testing.B) {
			e := openBench(b, db)
			for b.Loop() {
				rs, err := bench.RunScale(context.Background(), e, bench.Config{ScaleConfig: bench.ScaleConfig{Quick: true}})
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range rs {
					if r.Met != nil && !*r.Met && r.Name != "handoff_release_to_held" {
						b.Logf("%s: target %q missed: %+v", r.Name, r.Target, r.Metrics)
					}
				}
			}
		})
	}
}
