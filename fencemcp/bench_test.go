package fencemcp_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencemcp"
	"github.com/fencekit/fence/fencemcp/internal/harness"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/task"
)

// benchWorld is a store, a task at an epoch, and a connection whose tool
// inserts one row: plainly, or through fencemcp (claim checked at admission
// and again under the lease row's lock in the write's transaction).
type benchWorld struct {
	fs   *fence.Store
	ts   *task.Store
	conn *harness.Conn
	e    task.Epoch
}

func newBenchWorld(b *testing.B, be teststore.Backend, sdk string, fenced bool) *benchWorld {
	fs := be.Open(b)
	ts, err := task.New(fs)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fs.DB().Exec(`CREATE TABLE ` + fs.Prefix() + `bench_effects (step VARCHAR(191), epoch BIGINT)`); err != nil {
		b.Fatal(err)
	}
	ins := fs.Rebind(`INSERT INTO ` + fs.Prefix() + `bench_effects (step, epoch) VALUES (?, ?)`)
	key := newKey(b)
	o := harness.Options{SDK: sdk, Wire: harness.HTTP}
	if fenced {
		lc, err := fencemcp.NewLeaseChecker(fs)
		if err != nil {
			b.Fatal(err)
		}
		v, _ := fencemcp.NewVerifier(key, nil)
		o.Guard, _ = fencemcp.NewGuard(v, lc)
		o.Stamper, _ = fencemcp.NewStamper(key, true)
		o.Tool = func(ctx context.Context, a harness.Args) (string, error) {
			c, _ := fencemcp.ClaimFrom(ctx)
			return "ok", lc.InTx(ctx, c, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, ins, c.Step, c.Fence)
				return err
			})
		}
	} else {
		o.Tool = func(ctx context.Context, a harness.Args) (string, error) {
			_, err := fs.DB().ExecContext(ctx, ins, a.Step, a.Epoch)
			return "ok", err
		}
	}
	w := &benchWorld{fs: fs, ts: ts, conn: harness.Start(b, o)}
	ctx := context.Background()
	if err := ts.Create(ctx, "bench", task.Plan{}); err != nil {
		b.Fatal(err)
	}
	if w.e, err = ts.Start(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	return w
}

func benchBackends(b *testing.B) []teststore.Backend {
	return []teststore.Backend{teststore.SQLite, teststore.Postgres}
}

func percentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), "p50-µs/call")
	b.ReportMetric(at(0.99), "p99-µs/call")
}

// BenchmarkToolCall is one tool call whose tool writes a row, over
// streamable HTTP on loopback: plain (no fence), fencemcp (stamped,
// verified, lease checked at admission and in the write's transaction),
// and fencemcp+ledger (the agent also claims and records the step in
// task's effect ledger). The added latency per call is the difference of
// the p50 and p99 metrics.
func BenchmarkToolCall(b *testing.B) {
	for _, be := range benchBackends(b) {
		for _, sdk := range []string{harness.GoSDK, harness.MCPGo} {
			for _, variant := range []string{"plain", "fencemcp", "fencemcp+ledger"} {
				b.Run(be.Name+"/"+sdk+"/"+variant, func(b *testing.B) {
					w := newBenchWorld(b, be, sdk, variant != "plain")
					var l *task.Ledger
					if variant == "fencemcp+ledger" {
						var err error
						if l, err = task.NewLedger(w.ts); err != nil {
							b.Fatal(err)
						}
					}
					ctx := context.Background()
					lat := make([]time.Duration, 0, b.N)
					b.ResetTimer()
					for i := range b.N {
						step := fmt.Sprintf("s%d", i)
						a := harness.Args{Payload: "bench", Step: step, Epoch: w.e.Number()}
						start := time.Now()
						var err error
						switch variant {
						case "plain":
							_, err = w.conn.Call(ctx, a)
						case "fencemcp":
							_, err = w.conn.Call(fencemcp.WithStep(ctx, w.e, step), a)
						default:
							_, err = l.Do(ctx, w.e, step, []byte(step), func(ctx context.Context) ([]byte, error) {
								out, err := w.conn.Call(fencemcp.WithStep(ctx, w.e, step), a)
								return []byte(out.Text), err
							})
						}
						lat = append(lat, time.Since(start))
						if err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					percentiles(b, lat)
				})
			}
		}
	}
}

// BenchmarkReplanToRefusal measures the time from the start of Replan to
// the first call of the old epoch that the server refuses, with the old
// epoch's agent calling the tool in a loop meanwhile.
func BenchmarkReplanToRefusal(b *testing.B) {
	for _, be := range benchBackends(b) {
		b.Run(be.Name, func(b *testing.B) {
			w := newBenchWorld(b, be, harness.GoSDK, true)
			ctx := context.Background()
			var total time.Duration
			lat := make([]time.Duration, 0, b.N)
			for i := range b.N {
				old := w.e
				var n atomic.Int64
				refused := make(chan time.Time, 1)
				stop := make(chan struct{})
				go func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						step := fmt.Sprintf("r%d-%d", i, n.Add(1))
						out, err := w.conn.Call(fencemcp.WithStep(ctx, old, step), harness.Args{Payload: "bench", Step: step})
						if err == nil && out.Refused {
							refused <- time.Now()
							return
						}
					}
				}()
				for n.Load() < 2 { // the old epoch is calling
					time.Sleep(100 * time.Microsecond)
				}
				start := time.Now()
				e, err := w.ts.Replan(ctx, "bench", task.Plan{Model: fmt.Sprint(i)})
				if err != nil {
					b.Fatal(err)
				}
				d := (<-refused).Sub(start)
				close(stop)
				total += d
				lat = append(lat, d)
				w.e = e
			}
			slices.Sort(lat)
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs-replan-to-refusal")
			b.ReportMetric(float64(lat[int(0.99*float64(len(lat)-1))].Microseconds()), "p99-µs-replan-to-refusal")
		})
	}
}
