package fenceotel_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fenceotel"
)

// setup returns a migrated SQLite store traced into a span recorder, with a
// table "items" (id 1 present) for fenced writes. extra observers come after
// fenceotel's.
func setup(t *testing.T, extra ...fence.Observer) (*fence.Store, *tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	ctx := t.Context()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	opts := []fence.Option{fence.WithObserver(fenceotel.New(tp))}
	for _, o := range extra {
		opts = append(opts, fence.WithObserver(o))
	}
	s, err := fencedsn.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "x.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO items VALUES (1, '')`); err != nil {
		t.Fatal(err)
	}
	return s, sr, tp
}

const update = `UPDATE items SET v = ? WHERE id = ? AND {{fence}}`

// want is what a test expects of one span.
type want struct {
	name   string
	attrs  map[attribute.Key]attribute.Value // must be present with these values
	absent []attribute.Key
	status codes.Code
	errors int // exception events
}

func check(t *testing.T, spans []sdktrace.ReadOnlySpan, ws ...want) {
	t.Helper()
	if len(spans) != len(ws) {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name())
		}
		t.Fatalf("%d spans %q, want %d", len(spans), names, len(ws))
	}
	for i, w := range ws {
		s := spans[i]
		if s.Name() != w.name {
			t.Errorf("span %d: name %q, want %q", i, s.Name(), w.name)
			continue
		}
		if s.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s: kind %v, want client", w.name, s.SpanKind())
		}
		got := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			got[kv.Key] = kv.Value
		}
		for k, v := range w.attrs {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: %s = %v (present %v), want %v", w.name, k, g.String(), ok, v.String())
			}
		}
		for _, k := range w.absent {
			if g, ok := got[k]; ok {
				t.Errorf("%s: %s = %v, want absent", w.name, k, g.String())
			}
		}
		if s.Status().Code != w.status {
			t.Errorf("%s: status %v %q, want %v", w.name, s.Status().Code, s.Status().Description, w.status)
		}
		if w.status == codes.Error && s.Status().Description == "" {
			t.Errorf("%s: error status without a description", w.name)
		}
		n := 0
		for _, e := range s.Events() {
			if e.Name == "exception" {
				n++
			}
		}
		if n != w.errors {
			t.Errorf("%s: %d recorded errors, want %d", w.name, n, w.errors)
		}
	}
}

func attrs(kvs ...attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestLeaseSpans(t *testing.T) {
	ctx := t.Context()
	s, sr, _ := setup(t)

	a, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "job", time.Minute); !errors.Is(err, fence.ErrHeld) {
		t.Fatalf("second acquire: %v", err)
	}
	if _, err := s.Renew(ctx, a.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, a.Token, update, "x", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, a.Token, update, "x", 999); !errors.Is(err, fence.ErrNoMatch) {
		t.Fatalf("write of a missing row: %v", err)
	}
	rf, err := s.Revoke(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx, a.Token, time.Minute); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("renew after revoke: %v", err)
	}
	if _, err := s.Exec(ctx, a.Token, update, "y", 1); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("write after revoke: %v", err)
	}
	b, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RenewBatch(ctx, []fence.Token{a.Token, b.Token}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, b.Token); err != nil {
		t.Fatal(err)
	}

	lease := fenceotel.AttrLease.String("job")
	check(t, sr.Ended(),
		want{name: "fence.acquire", attrs: attrs(fenceotel.AttrOp.String("acquire"), lease,
			fenceotel.AttrFence.Int64(a.Token.Fence), fenceotel.AttrOutcome.String("ok"))},
		want{name: "fence.acquire", attrs: attrs(lease, fenceotel.AttrOutcome.String("held"),
			fenceotel.AttrHolderFence.Int64(a.Token.Fence), fenceotel.AttrHolder.String(s.Holder())), absent: []attribute.Key{fenceotel.AttrFence}},
		want{name: "fence.renew", attrs: attrs(fenceotel.AttrOp.String("renew"), lease,
			fenceotel.AttrFence.Int64(a.Token.Fence), fenceotel.AttrOutcome.String("ok"))},
		want{name: "fence.fenced_write", attrs: attrs(fenceotel.AttrOp.String("fenced_write"), lease,
			fenceotel.AttrFence.Int64(a.Token.Fence), fenceotel.AttrOutcome.String("ok"))},
		want{name: "fence.fenced_write", attrs: attrs(lease, fenceotel.AttrOutcome.String("no_match")),
			status: codes.Error, errors: 1},
		want{name: "fence.revoke", attrs: attrs(lease, fenceotel.AttrFence.Int64(rf), fenceotel.AttrOutcome.String("ok"))},
		want{name: "fence.renew", attrs: attrs(lease, fenceotel.AttrFence.Int64(a.Token.Fence),
			fenceotel.AttrOutcome.String("lost"), fenceotel.AttrLostReason.String("revoked")),
			status: codes.Error, errors: 1},
		want{name: "fence.fenced_write", attrs: attrs(lease, fenceotel.AttrFence.Int64(a.Token.Fence),
			fenceotel.AttrOutcome.String("lost"), fenceotel.AttrLostReason.String("revoked")),
			status: codes.Error, errors: 1},
		want{name: "fence.acquire", attrs: attrs(lease, fenceotel.AttrFence.Int64(b.Token.Fence), fenceotel.AttrOutcome.String("ok"))},
		want{name: "fence.renew_batch", attrs: attrs(fenceotel.AttrOutcome.String("ok"),
			fenceotel.AttrBatchSize.Int(2), fenceotel.AttrBatchLost.Int(1)),
			absent: []attribute.Key{fenceotel.AttrLease, fenceotel.AttrFence}},
		want{name: "fence.release", attrs: attrs(lease, fenceotel.AttrFence.Int64(b.Token.Fence), fenceotel.AttrOutcome.String("ok"))},
	)
}

func TestRunSpans(t *testing.T) {
	s, sr, tp := setup(t)
	ctx, parent := tp.Tracer("test").Start(t.Context(), "nightly-report")
	job := func(ctx context.Context) error {
		tok, _ := fence.TokenFrom(ctx)
		_, err := s.Exec(ctx, tok, update, "done", 1)
		return err
	}
	r, err := fence.Run(ctx, s, "nightly", job)
	if err != nil || r.Outcome != fence.Completed {
		t.Fatalf("run: %+v, %v", r, err)
	}
	parent.End()

	spans := sr.Ended()
	lease := fenceotel.AttrLease.String("nightly")
	f := fenceotel.AttrFence.Int64(r.Token.Fence)
	check(t, spans[:len(spans)-1],
		want{name: "fence.acquire", attrs: attrs(lease, f)},
		want{name: "fence.start_run", attrs: attrs(lease, f, fenceotel.AttrRunStatus.String("running"))},
		want{name: "fence.fenced_write", attrs: attrs(lease, f, fenceotel.AttrOutcome.String("ok"))},
		want{name: "fence.finish_run", attrs: attrs(lease, f, fenceotel.AttrRunStatus.String("succeeded"))},
		want{name: "fence.release", attrs: attrs(lease, f)},
	)
	// Every operation of the run is a child of the caller's span.
	root := parent.SpanContext()
	for _, sp := range spans[:len(spans)-1] {
		if sp.Parent().SpanID() != root.SpanID() || sp.SpanContext().TraceID() != root.TraceID() {
			t.Errorf("%s: parent %v, want the caller's span %v", sp.Name(), sp.Parent().SpanID(), root.SpanID())
		}
	}
}

func TestRejectedCompletion(t *testing.T) {
	ctx := t.Context()
	s, sr, _ := setup(t)
	a, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.StartRun(ctx, a.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, a.Token, id, fence.Completion{}); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("finish after revoke: %v", err)
	}
	spans := sr.Ended()
	check(t, spans[len(spans)-1:], want{name: "fence.finish_run",
		attrs: attrs(fenceotel.AttrFence.Int64(a.Token.Fence), fenceotel.AttrOutcome.String("lost"),
			fenceotel.AttrLostReason.String("revoked"), fenceotel.AttrRunStatus.String("lost")),
		status: codes.Error, errors: 1})
}

// spanSeer is an observer after fenceotel's: what it sees is what the driver
// runs with.
type spanSeer struct{ valid []bool }

func (o *spanSeer) Observe(ctx context.Context, _ fence.Op, _ string) (context.Context, func(fence.Event)) {
	o.valid = append(o.valid, trace.SpanFromContext(ctx).SpanContext().IsValid())
	return ctx, func(fence.Event) {}
}

func TestOperationRunsInsideItsSpan(t *testing.T) {
	seer := &spanSeer{}
	s, sr, _ := setup(t, seer)
	if _, err := s.Acquire(t.Context(), "job", time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(seer.valid) != 1 || !seer.valid[0] {
		t.Fatalf("span in the operation's context: %v", seer.valid)
	}
	if n := len(sr.Ended()); n != 1 {
		t.Fatalf("%d spans, want 1", n)
	}
}

func TestNilProviderUsesGlobal(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)))
	defer otel.SetTracerProvider(prev)

	_, done := fenceotel.New(nil).Observe(t.Context(), fence.OpAcquire, "job")
	done(fence.Event{Err: errors.New("boom")})
	check(t, sr.Ended(), want{name: "fence.acquire",
		attrs: attrs(fenceotel.AttrOutcome.String("error")), status: codes.Error, errors: 1})
}

// The tokens of a renew_batch are events on the batch's span, each with its
// lease and outcome; a refused token is not an error of the batch's span.
func TestRenewBatchTokenEvents(t *testing.T) {
	ctx := t.Context()
	s, sr, _ := setup(t)
	a, err := s.Acquire(ctx, "shard-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, "shard-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, "shard-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RenewBatch(ctx, []fence.Token{a.Token, b.Token}, time.Minute); err != nil {
		t.Fatal(err)
	}
	spans := sr.Ended()
	batch := spans[len(spans)-1:]
	check(t, batch, want{name: "fence.renew_batch", attrs: attrs(fenceotel.AttrOutcome.String("ok"),
		fenceotel.AttrBatchSize.Int(2), fenceotel.AttrBatchLost.Int(1)),
		absent: []attribute.Key{fenceotel.AttrLease, fenceotel.AttrFence}})
	evs := batch[0].Events()
	if len(evs) != 2 {
		t.Fatalf("events %+v, want 2", evs)
	}
	for i, w := range []map[attribute.Key]attribute.Value{
		attrs(fenceotel.AttrLease.String("shard-a"), fenceotel.AttrFence.Int64(a.Token.Fence), fenceotel.AttrOutcome.String("ok")),
		attrs(fenceotel.AttrLease.String("shard-b"), fenceotel.AttrFence.Int64(b.Token.Fence), fenceotel.AttrOutcome.String("lost"),
			fenceotel.AttrLostReason.String("revoked")),
	} {
		if evs[i].Name != "fence.renew_batch_token" {
			t.Errorf("event %d: name %q", i, evs[i].Name)
		}
		got := attrs(evs[i].Attributes...)
		if len(got) != len(w) {
			t.Errorf("event %d: attributes %v, want %v", i, got, w)
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("event %d: %s = %v, want %v", i, k, got[k].String(), v.String())
			}
		}
	}
}

func TestMarkRunLostSpan(t *testing.T) {
	ctx := t.Context()
	s, sr, _ := setup(t)
	a, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.StartRun(ctx, a.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MarkRunLost(ctx, id, a.Token.Fence, "worker gave up"); err != nil {
		t.Fatal(err)
	}
	spans := sr.Ended()
	check(t, spans[len(spans)-2:],
		want{name: "fence.start_run", attrs: attrs(fenceotel.AttrRunID.Int64(id), fenceotel.AttrRunStatus.String("running"))},
		want{name: "fence.mark_run_lost", attrs: attrs(fenceotel.AttrOp.String("mark_run_lost"),
			fenceotel.AttrLease.String("job"), fenceotel.AttrFence.Int64(a.Token.Fence), fenceotel.AttrRunID.Int64(id),
			fenceotel.AttrRunStatus.String("lost"), fenceotel.AttrOutcome.String("ok"))})
}
