package fencehttp

import (
	"context"
	"net/http"

	"github.com/fencekit/fence"
)

type stepKey struct{}

// WithStep returns ctx naming the step (of a task, of a job) that the
// requests made with it carry out, for Transport's default Idempotency-Key.
// The key is derived from the lease, the step, the method and the URL, and
// not from the fence: when a newer holder retries a step an older one
// completed just before it lost the lease, the service sees the same key
// and answers with the first outcome instead of acting twice. Name each
// effect with its own step; two requests that must both happen need two
// steps.
func WithStep(ctx context.Context, step string) context.Context {
	return context.WithValue(ctx, stepKey{}, step)
}

// defaultKey is the Idempotency-Key Transport adds for r: only when the
// request's context names a step. Without one no key is right: a key with
// the fence changes when a newer holder retries (the effect runs twice),
// and a key of the lease and URL alone is the same for every run of a job
// (a later run's request would be answered with an earlier run's outcome).
func defaultKey(tok fence.Token, r *http.Request) (string, bool) {
	step, ok := r.Context().Value(stepKey{}).(string)
	if !ok || step == "" {
		return "", false
	}
	return fence.IdempotencyKey(tok, "fencehttp", step, r.Method, r.URL.String()), true
}
