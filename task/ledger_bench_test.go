package task_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/task"
)

// BenchmarkLedger measures what the effect ledger adds to a step. The step's
// effect is one fenced write (a Checkpoint of the task row, as a tool that
// writes to the same database would make):
//
//	bare:   the effect alone
//	ledger: Do around it, a new step each time (claim, effect, record)
//	replay: Do of a committed step (a retry: one claim that matches nothing
//	        and one read; the effect does not run)
//
// The added cost per step is ledger minus bare: two fenced statements, so
// two commits (on SQLite, with synchronous=FULL, two fsyncs of the WAL).
// p50-ns and p99-ns are the percentiles of single calls.
//
//	go test ./task -run '^$' -bench BenchmarkLedger -benchtime 2000x
func BenchmarkLedger(b *testing.B) {
	for _, be := range []teststore.Backend{teststore.SQLite, teststore.Postgres} {
		b.Run(be.Name, func(b *testing.B) {
			ts, err := task.New(be.Open(b), task.WithTTL(time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			l, err := task.NewLedger(ts)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := ts.Create(ctx, "bench", task.Plan{}); err != nil {
				b.Fatal(err)
			}
			e, err := ts.Start(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			var progress int
			effect := func(ctx context.Context) ([]byte, error) {
				progress++ // a new value each time: a write SQLite cannot skip
				return []byte("ok"), ts.Checkpoint(ctx, e, strconv.Itoa(progress))
			}
			payload := []byte(`{"amount":500,"currency":"EUR"}`)
			if _, err := l.Do(ctx, e, "committed", payload, effect); err != nil {
				b.Fatal(err)
			}
			var n int
			for _, c := range []struct {
				name string
				fn   func() error
			}{
				{"bare", func() error { _, err := effect(ctx); return err }},
				{"ledger", func() error {
					n++
					_, err := l.Do(ctx, e, "step-"+strconv.Itoa(n), payload, effect)
					return err
				}},
				{"replay", func() error {
					got, err := l.Do(ctx, e, "committed", payload, effect)
					if err == nil && !got.Replayed {
						b.Fatal("not replayed")
					}
					return err
				}},
			} {
				b.Run(c.name, func(b *testing.B) {
					lat := make([]time.Duration, 0, b.N)
					for b.Loop() {
						t0 := time.Now()
						if err := c.fn(); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(t0))
					}
					slices.Sort(lat)
					if len(lat) > 0 {
						b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
						b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
					}
				})
			}
		})
	}
}
