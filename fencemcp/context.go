package fencemcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencehttp"
	"github.com/fencekit/fence/task"
)

type callKey struct{}

type call struct {
	tok  fence.Token
	step string
}

// WithCall returns ctx carrying the holder's token and the step key for the
// tool calls made with it: the client middleware stamps each tools/call
// sent with this context. The step key names the effect, not the attempt:
// a retry of the same step, by this epoch or a later one, uses the same key.
func WithCall(ctx context.Context, t fence.Token, step string) context.Context {
	return context.WithValue(ctx, callKey{}, call{tok: t, step: step})
}

// WithStep is WithCall for a task's epoch.
func WithStep(ctx context.Context, e task.Epoch, step string) context.Context {
	return WithCall(ctx, e.Token, step)
}

func callFrom(ctx context.Context) (call, bool) {
	c, ok := ctx.Value(callKey{}).(call)
	return c, ok
}

// Stamper is the client side: it signs the entry (and the header value)
// of each tools/call made with a context from WithCall.
type Stamper struct {
	key []byte
	// requireStep: a call without WithCall fails instead of going out
	// unstamped.
	requireStep bool
}

// NewStamper returns a Stamper for key. With required, a tools/call whose
// context has no WithCall fails before it is sent; without it, such a call
// goes out unstamped (and a fencemcp server refuses it).
func NewStamper(key []byte, required bool) (*Stamper, error) {
	if len(key) < fencehttp.MinKeyLen {
		return nil, fmt.Errorf("%w: fencemcp: key is %d bytes, want at least %d random bytes", fence.ErrInvalid, len(key), fencehttp.MinKeyLen)
	}
	return &Stamper{key: append([]byte(nil), key...), requireStep: required}, nil
}

// ErrNoCall: a required stamp is missing from the call's context.
var ErrNoCall = errors.New("fencemcp: tools/call without fencemcp.WithCall in its context")

// Stamp returns the entry and the Fence-Token header value for a call of
// tool made with ctx, or ok false for an unstamped call.
func (s *Stamper) Stamp(ctx context.Context, tool string) (e Entry, header string, ok bool, err error) {
	c, found := callFrom(ctx)
	if !found {
		if s.requireStep {
			return Entry{}, "", false, fmt.Errorf("%w (tool %q)", ErrNoCall, tool)
		}
		return Entry{}, "", false, nil
	}
	e, err = Sign(s.key, c.tok, tool, c.step)
	if err != nil {
		return Entry{}, "", false, err
	}
	header, err = fencehttp.Sign(s.key, c.tok)
	if err != nil {
		return Entry{}, "", false, err
	}
	return e, header, true, nil
}

type headerKey struct{}

// WithHeader returns ctx carrying a Fence-Token header value for Transport.
// The go-sdk middleware sets it; user code does not need to.
func WithHeader(ctx context.Context, v string) context.Context {
	return context.WithValue(ctx, headerKey{}, v)
}

// Transport adds the Fence-Token header of the call being sent (WithHeader)
// to each HTTP request of a streamable-HTTP MCP client.
type Transport struct {
	Base http.RoundTripper // nil: http.DefaultTransport
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	v, ok := r.Context().Value(headerKey{}).(string)
	if !ok {
		return base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set(HeaderFence, v)
	return base.RoundTrip(r)
}

type claimKey struct{}

// WithClaim returns ctx carrying a verified claim; the server middleware
// calls it before the tool handler runs.
func WithClaim(ctx context.Context, c Claim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}

// ClaimFrom returns the verified claim of the tool call being handled.
func ClaimFrom(ctx context.Context) (Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(Claim)
	return c, ok
}
