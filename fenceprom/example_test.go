package fenceprom_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fenceprom"
)

// withMetrics runs job as the singleton "nightly-report" of the store at
// dsn, with the store's metrics registered in reg (serve reg with promhttp).
func withMetrics(ctx context.Context, dsn string, reg prometheus.Registerer, job fence.Job) (fence.Result, error) {
	m := fenceprom.New()
	if err := reg.Register(m); err != nil {
		return fence.Result{}, err
	}
	store, err := fencedsn.Open(ctx, dsn, fence.WithObserver(m))
	if err != nil {
		return fence.Result{}, err
	}
	defer store.Close()
	if _, err := store.Migrate(ctx); err != nil {
		return fence.Result{}, err
	}
	return fence.Run(ctx, store, "nightly-report", job)
}

func Example() {
	dir, err := os.MkdirTemp("", "fenceprom-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	reg := prometheus.NewRegistry()
	res, err := withMetrics(context.Background(), "sqlite:"+filepath.Join(dir, "fence.db"), reg,
		func(ctx context.Context) error { return nil })
	if err != nil {
		log.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "fence_runs_finished_total" {
			for _, m := range mf.GetMetric() {
				fmt.Println(res.Outcome, mf.GetName(), m.GetLabel()[1].GetValue(), m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// completed fence_runs_finished_total succeeded 1
}
