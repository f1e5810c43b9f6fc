package fenceprom_test

import (
	"context"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fenceprom"
)

func Example() {
	ctx := context.Background()
	m := fenceprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	go func() {
		log.Println(http.ListenAndServe(":9102", promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	}()

	store, err := fence.Open(ctx, "sqlite:fence.db", fence.WithObserver(m))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	_, err = fence.Run(ctx, store, "nightly-report", func(ctx context.Context) error {
		return nil // the job
	}, fence.OnLost(m.OnLost)) // also count jobs stopped at the renew deadline
	if err != nil {
		log.Fatal(err)
	}
}
