// Package fenceotel traces a fence.Store's lease operations with
// OpenTelemetry. It uses the OpenTelemetry API only: spans go to whatever
// TracerProvider you give it (or the global one), with whatever exporter you
// set up; without one they cost next to nothing.
//
//	// traced runs job as the singleton "nightly-report" of the store at dsn,
//	// with spans to tp (otel.GetTracerProvider() for the global one). A run
//	// has no span of its own, so it starts one around fence.Run: the
//	// runner's operations are its children.
//	func traced(ctx context.Context, dsn string, tp trace.TracerProvider, job fence.Job) (fence.Result, error) {
//		store, err := fencedsn.Open(ctx, dsn, fence.WithObserver(fenceotel.New(tp)))
//		if err != nil {
//			return fence.Result{}, err
//		}
//		defer store.Close()
//		if _, err := store.Migrate(ctx); err != nil {
//			return fence.Result{}, err
//		}
//		ctx, span := tp.Tracer("reports").Start(ctx, "nightly-report")
//		defer span.End()
//		return fence.Run(ctx, store, "nightly-report", job)
//	}
//
// Each operation is a span of kind client named "fence.<op>": fence.acquire,
// fence.renew, fence.renew_batch, fence.release, fence.revoke,
// fence.fenced_write (Exec, ExecIn), fence.fenced_tx (InTx, CheckTx),
// fence.start_run, fence.finish_run and fence.mark_run_lost. The operation
// runs inside its span, so spans of an instrumented database driver are its
// children.
//
// Attributes:
//
//	fence.op             the operation, as in the span name
//	fence.lease          the lease name (not on renew_batch)
//	fence.fence          the token's fence; for acquire the new fence, when acquired
//	fence.outcome        ok, held, lost, no_match or error
//	fence.lost_reason    why the token lost its lease: expired, released,
//	                     revoked, superseded, missing or unknown
//	fence.holder_fence   the holder's fence when acquire found the lease held
//	fence.holder         and the holder's name (fence.WithHolder), when it
//	                     has one
//	fence.run_id         the run of start_run (when started), finish_run and
//	                     mark_run_lost
//	fence.run_status     the run's status after start_run and finish_run; lost
//	                     after a mark_run_lost that marked the run
//	fence.batch_size     renew_batch: tokens renewed,
//	fence.batch_lost     and how many of them were refused
//
// The tokens of a renew_batch share its statements, so they have no spans:
// each is an event named fence.renew_batch_token on the batch's span, with
// fence.lease, fence.fence, fence.outcome and, if refused, fence.lost_reason
// (outcome error, for every token, when the batch failed as a whole). The
// errors of single tokens are not recorded as errors of the batch's span.
//
// A lease held by another owner is an expected answer to an acquire, not a
// failure: its span has outcome "held" and no error status. Every other
// error, a lost lease included, is recorded on the span (RecordError) and
// sets its status to Error with the error's message.
//
// A run has no span of its own: the runner's acquire, start_run, renewals,
// finish_run and release are spans in the trace of the context given to
// fence.Run. To see a run as one span, start one around it, as traced
// above does.
package fenceotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fence"
)

// ScopeName is the instrumentation scope of fence's tracer.
const ScopeName = "github.com/fencekit/fence/fenceotel"

// Attribute keys.
const (
	AttrOp          = attribute.Key("fence.op")
	AttrLease       = attribute.Key("fence.lease")
	AttrFence       = attribute.Key("fence.fence")
	AttrOutcome     = attribute.Key("fence.outcome")
	AttrLostReason  = attribute.Key("fence.lost_reason")
	AttrHolderFence = attribute.Key("fence.holder_fence")
	AttrHolder      = attribute.Key("fence.holder")
	AttrRunID       = attribute.Key("fence.run_id")
	AttrRunStatus   = attribute.Key("fence.run_status")
	AttrBatchSize   = attribute.Key("fence.batch_size")
	AttrBatchLost   = attribute.Key("fence.batch_lost")
)

// Observer is a fence.Observer that starts a span for every operation.
type Observer struct {
	tracer trace.Tracer
}

// New returns an Observer whose spans go to tp; nil means the global
// TracerProvider (otel.GetTracerProvider) at the time of the call.
func New(tp trace.TracerProvider) *Observer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Observer{tracer: tp.Tracer(ScopeName)}
}

// Observe implements fence.Observer.
func (o *Observer) Observe(ctx context.Context, op fence.Op, lease string) (context.Context, func(fence.Event)) {
	if op == fence.OpRenewBatchToken {
		// Inside the batch's span, which ctx carries.
		span := trace.SpanFromContext(ctx)
		return ctx, func(e fence.Event) { tokenEvent(span, op, lease, e) }
	}
	attrs := []attribute.KeyValue{AttrOp.String(string(op))}
	if lease != "" {
		attrs = append(attrs, AttrLease.String(lease))
	}
	ctx, span := o.tracer.Start(ctx, "fence."+string(op),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, func(e fence.Event) {
		end(span, op, e)
		span.End()
	}
}

func end(span trace.Span, op fence.Op, e fence.Event) {
	if !span.IsRecording() {
		return
	}
	if e.Fence != 0 {
		span.SetAttributes(AttrFence.Int64(e.Fence))
	}
	if e.Run != 0 {
		span.SetAttributes(AttrRunID.Int64(e.Run))
	}
	if e.Status != "" {
		span.SetAttributes(AttrRunStatus.String(string(e.Status)))
	}
	if op == fence.OpRenewBatch {
		span.SetAttributes(AttrBatchSize.Int(e.Count), AttrBatchLost.Int(e.Lost))
	}
	var (
		held *fence.HeldError
		lost *fence.LostError
	)
	switch {
	case e.Err == nil:
		span.SetAttributes(AttrOutcome.String("ok"))
		return
	case errors.As(e.Err, &held):
		span.SetAttributes(AttrOutcome.String("held"), AttrHolderFence.Int64(held.Fence))
		if held.Holder != "" {
			span.SetAttributes(AttrHolder.String(held.Holder))
		}
		return
	case errors.Is(e.Err, fence.ErrHeld):
		span.SetAttributes(AttrOutcome.String("held"))
		return
	case errors.As(e.Err, &lost):
		span.SetAttributes(AttrOutcome.String("lost"), AttrLostReason.String(string(lost.Reason)))
	case errors.Is(e.Err, fence.ErrLost):
		span.SetAttributes(AttrOutcome.String("lost"))
	case errors.Is(e.Err, fence.ErrNoMatch):
		span.SetAttributes(AttrOutcome.String("no_match"))
	default:
		span.SetAttributes(AttrOutcome.String("error"))
	}
	span.RecordError(e.Err)
	span.SetStatus(codes.Error, e.Err.Error())
}

// tokenEvent adds the result of one token of a renew_batch to the batch's span.
func tokenEvent(span trace.Span, op fence.Op, lease string, e fence.Event) {
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{AttrLease.String(lease), AttrFence.Int64(e.Fence)}
	var lost *fence.LostError
	switch {
	case e.Err == nil:
		attrs = append(attrs, AttrOutcome.String("ok"))
	case errors.As(e.Err, &lost):
		attrs = append(attrs, AttrOutcome.String("lost"), AttrLostReason.String(string(lost.Reason)))
	case errors.Is(e.Err, fence.ErrLost):
		attrs = append(attrs, AttrOutcome.String("lost"))
	default:
		attrs = append(attrs, AttrOutcome.String("error"))
	}
	span.AddEvent("fence."+string(op), trace.WithAttributes(attrs...))
}

var _ fence.Observer = (*Observer)(nil)
