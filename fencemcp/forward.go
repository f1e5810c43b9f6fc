package fencemcp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fencekit/fence"
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
// cannot call fencehttp.Sign; the MAC input is fencehttp's v1 format, and a
// test checks that fencehttp's Verifier accepts it.
func HeaderFor(key []byte, c Claim) (string, error) {
	if len(key) < fencehttp.MinKeyLen {
		return "", fmt.Errorf("%w: fencemcp: forward key is %d bytes, want at least %d", fence.ErrInvalid, len(key), fencehttp.MinKeyLen)
	}
	if c.Fence <= 0 || len(c.Owner) != 32 {
		return "", fmt.Errorf("%w: fencemcp: cannot forward claim of lease %q fence %d", fence.ErrInvalid, c.Lease, c.Fence)
	}
	f := strconv.FormatInt(c.Fence, 10)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("fencehttp/v1\n" + c.Lease + "\n" + f + "\n" + c.Owner))
	return f + "." + c.Owner + "." + hex.EncodeToString(m.Sum(nil)), nil
}
