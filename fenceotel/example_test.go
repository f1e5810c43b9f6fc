package fenceotel_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fenceotel"
)

// traced runs job as the singleton "nightly-report" of the store at dsn,
// with spans to tp (otel.GetTracerProvider() for the global one). A run
// has no span of its own, so it starts one around fence.Run: the
// runner's operations are its children.
func traced(ctx context.Context, dsn string, tp trace.TracerProvider, job fence.Job) (fence.Result, error) {
	store, err := fencedsn.Open(ctx, dsn, fence.WithObserver(fenceotel.New(tp)))
	if err != nil {
		return fence.Result{}, err
	}
	defer store.Close()
	if _, err := store.Migrate(ctx); err != nil {
		return fence.Result{}, err
	}
	ctx, span := tp.Tracer("reports").Start(ctx, "nightly-report")
	defer span.End()
	return fence.Run(ctx, store, "nightly-report", job)
}

func Example() {
	dir, err := os.MkdirTemp("", "fenceotel-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	res, err := traced(context.Background(), "sqlite:"+filepath.Join(dir, "fence.db"), tp,
		func(ctx context.Context) error { return nil })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Outcome)
	for _, s := range rec.Ended() {
		fmt.Println(s.Name(), s.Parent().SpanID() == rec.Ended()[len(rec.Ended())-1].SpanContext().SpanID())
	}
	// Output:
	// completed
	// fence.acquire true
	// fence.start_run true
	// fence.finish_run true
	// fence.release true
	// nightly-report false
}
