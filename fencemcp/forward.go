package fencemcp

import (
	"fmt"
	"net/http"

	"github.com/fencekit/fence/fencehttp"
)

// Forward carries the claim of the tool call being handled to a downstream
// HTTP service that checks fences with fencehttp: each request whose
// context has a claim (ClaimFrom) gets a Fence-Token header for the claim's
// lease, fence and owner id, signed with Key (the key shared with that
// service, which need not be the MCP client's), and an Idempotency-Key
// that names the step (the same for every epoch), unless it has one.
type Forward struct {
	Base http.RoundTripper // nil: http.DefaultTransport
	Key  []byte
}

// RoundTrip implements http.RoundTripper.
func (f *Forward) RoundTrip(r *http.Request) (*http.Response, error) {
	base := f.Base
	if base == nil {
		base = http.DefaultTransport
	}
	c, ok := ClaimFrom(r.Context())
	if !ok {
		return base.RoundTrip(r)
	}
	v, err := HeaderFor(f.Key, c)
	if err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set(HeaderFence, v)
	if r.Header.Get(fencehttp.HeaderIdempotencyKey) == "" {
		r.Header.Set(fencehttp.HeaderIdempotencyKey, c.IdempotencyKey())
	}
	return base.RoundTrip(r)
}

// HeaderFor returns the Fence-Token value (fencehttp's FENCE.OWNER.MAC) of a
// claim under key. The server has the owner id, not the owner token, so it
// signs with fencehttp.SignClaim, not fencehttp.Sign.
func HeaderFor(key []byte, c Claim) (string, error) {
	h, err := fencehttp.SignClaim(key, fencehttp.Claim{Lease: c.Lease, Fence: c.Fence, Owner: c.Owner})
	if err != nil {
		return "", fmt.Errorf("fencemcp: cannot forward the claim of step %q: %w", c.Step, err)
	}
	return h, nil
}
