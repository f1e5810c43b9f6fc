// Package fencehttp carries a fence token across HTTP so that a downstream
// service you own can fence too: the client sends the lease and fence as
// headers, and the server rejects a request whose fence is lower than the
// highest it has seen for the resource. Without this, a stale worker's call
// to another service is an unfenced side effect.
package fencehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/fencekit/fence"
)

// Header names.
const (
	HeaderFence          = "Fence-Token" // the fence number, decimal
	HeaderLease          = "Fence-Lease" // the lease name
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Transport adds the fence headers to every request whose context carries a
// token (fence.TokenFrom, as inside a fence.Run job, or WithToken), plus an
// Idempotency-Key derived from the token, method and URL unless the request
// has one. The owner token is never sent: it is the holder's secret.
type Transport struct {
	// Base is the underlying transport; nil means http.DefaultTransport.
	Base http.RoundTripper
}

type tokenKey struct{}

// WithToken returns ctx carrying t for Transport, outside a fence.Run job.
func WithToken(ctx context.Context, t fence.Token) context.Context {
	return context.WithValue(ctx, tokenKey{}, t)
}

func tokenFrom(ctx context.Context) (fence.Token, bool) {
	if t, ok := ctx.Value(tokenKey{}).(fence.Token); ok {
		return t, true
	}
	return fence.TokenFrom(ctx)
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	tok, ok := tokenFrom(r.Context())
	if !ok {
		return base.RoundTrip(r)
	}
	r = r.Clone(r.Context()) // a RoundTripper must not modify the caller's request
	r.Header.Set(HeaderFence, strconv.FormatInt(tok.Fence, 10))
	r.Header.Set(HeaderLease, tok.Lease)
	if r.Header.Get(HeaderIdempotencyKey) == "" {
		r.Header.Set(HeaderIdempotencyKey, fence.IdempotencyKey(tok, r.Method, r.URL.String()))
	}
	return base.RoundTrip(r)
}

// Client returns an *http.Client that sends fence headers.
func Client(base http.RoundTripper) *http.Client {
	return &http.Client{Transport: &Transport{Base: base}}
}

// ErrStale is returned by a Checker for a fence below the highest seen.
var ErrStale = errors.New("fencehttp: stale fence")

// Checker remembers the highest fence seen per resource and refuses lower
// ones. Check must be atomic: compare and record in one step.
type Checker interface {
	// Check records fence for resource if it is >= the highest seen, else
	// returns an error wrapping ErrStale.
	Check(ctx context.Context, resource string, fence int64) error
}

// MemoryChecker is a Checker for one process. Use a database-backed one (for
// example fence.ExecResource on a row with a fence_token column) when
// several replicas serve the resource.
type MemoryChecker struct {
	mu      sync.Mutex
	highest map[string]int64
}

// Check implements Checker.
func (c *MemoryChecker) Check(_ context.Context, resource string, f int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.highest == nil {
		c.highest = map[string]int64{}
	}
	if h := c.highest[resource]; f < h {
		return fmt.Errorf("%w: resource %q fence %d is below %d", ErrStale, resource, f, h)
	}
	c.highest[resource] = f
	return nil
}

// Middleware checks the fence headers of each request before calling next.
// resource names what the request protects (by default the lease name). A
// request without headers is refused with 428 unless allowMissing; a
// malformed one gets 400; a stale one gets 409 Conflict with the reason.
func Middleware(c Checker, resource func(r *http.Request) string, allowMissing bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			raw, lease := r.Header.Get(HeaderFence), r.Header.Get(HeaderLease)
			if raw == "" {
				if allowMissing {
					next.ServeHTTP(w, r)
					return
				}
				http.Error(w, "fencehttp: missing "+HeaderFence+" header", http.StatusPreconditionRequired)
				return
			}
			f, err := strconv.ParseInt(raw, 10, 64)
			if err != nil || f <= 0 {
				http.Error(w, "fencehttp: "+HeaderFence+" must be a positive integer", http.StatusBadRequest)
				return
			}
			if err := fence.ValidateName(lease); err != nil {
				http.Error(w, "fencehttp: bad "+HeaderLease+" header", http.StatusBadRequest)
				return
			}
			res := lease
			if resource != nil {
				res = resource(r)
			}
			if err := c.Check(r.Context(), res, f); err != nil {
				code := http.StatusConflict
				if !errors.Is(err, ErrStale) {
					code = http.StatusServiceUnavailable
				}
				http.Error(w, err.Error(), code)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
