package fenceotel_test

import (
	"context"
	"log"

	"go.opentelemetry.io/otel"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fenceotel"
)

func Example() {
	ctx := context.Background()
	// Spans go to the global TracerProvider, which the application sets up
	// with its own exporter (otel.SetTracerProvider).
	store, err := fence.Open(ctx, "sqlite:fence.db", fence.WithObserver(fenceotel.New(nil)))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// One span around the run; the runner's operations are its children.
	ctx, span := otel.Tracer("reports").Start(ctx, "nightly-report")
	defer span.End()
	_, err = fence.Run(ctx, store, "nightly-report", func(ctx context.Context) error {
		return nil // the job
	})
	if err != nil {
		log.Fatal(err)
	}
}
