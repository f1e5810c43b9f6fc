package fencehttp

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/fencekit/fence"
)

// Header names.
const (
	// HeaderFence carries FENCE.OWNER.MAC: the fence in decimal, the owner
	// id (a digest of the holder's owner token, never the token itself) and
	// an HMAC-SHA256 over lease, fence and owner id, each part in lower-case
	// hex. The lease is not sent: the server decides which lease guards a
	// request, and a token of another lease fails the MAC.
	HeaderFence          = "Fence-Token"
	HeaderIdempotencyKey = "Idempotency-Key"
)

// MinKeyLen is the shortest key Sign and NewVerifier accept: 32 bytes, the
// output size of SHA-256, so the key is not the weak part of the MAC.
const MinKeyLen = 32

// Sign returns the HeaderFence value for t under key. Only the holder side
// (whoever acquired the lease) and the receiving service share key; with it,
// anyone can mint any fence, so keep it as secret as a database password.
func Sign(key []byte, t fence.Token) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	if err := fence.ValidateName(t.Lease); err != nil {
		return "", fmt.Errorf("fencehttp: cannot sign: %w", err)
	}
	if t.Fence <= 0 || t.Owner == "" {
		return "", fmt.Errorf("%w: fencehttp: cannot sign token %q: it needs a positive fence and an owner (use the Token of an acquired lease)", fence.ErrInvalid, t.String())
	}
	return SignClaim(key, Claim{Lease: t.Lease, Fence: t.Fence, Owner: OwnerID(t.Owner)})
}

// SignClaim returns the HeaderFence value for a claim: a lease, a fence and
// an owner id (OwnerID), without the owner token. It is for a party that
// relays a fence it has verified rather than holds the lease, such as an
// MCP server or a gateway passing a caller's epoch to a downstream service
// under that service's key (the Claim a Verifier returned, re-signed).
// Sign(key, t) is SignClaim(key, Claim{t.Lease, t.Fence, OwnerID(t.Owner)}).
func SignClaim(key []byte, c Claim) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	if err := fence.ValidateName(c.Lease); err != nil {
		return "", fmt.Errorf("fencehttp: cannot sign: %w", err)
	}
	if c.Fence <= 0 || len(c.Owner) != 32 || strings.ContainsFunc(c.Owner, notHex) {
		return "", fmt.Errorf("%w: fencehttp: cannot sign claim of lease %q fence %d owner id %q: it needs a positive fence and a 32-hex-digit owner id (OwnerID of the owner token)", fence.ErrInvalid, c.Lease, c.Fence, c.Owner)
	}
	f := strconv.FormatInt(c.Fence, 10)
	return f + "." + c.Owner + "." + hex.EncodeToString(mac(key, c.Lease, f, c.Owner)), nil
}

func checkKey(key []byte) error {
	if len(key) < MinKeyLen {
		return fmt.Errorf("%w: fencehttp: key is %d bytes, want at least %d random bytes (crypto/rand)", fence.ErrInvalid, len(key), MinKeyLen)
	}
	return nil
}

// OwnerID is the owner id that stands for an owner token on the wire: the
// first 16 bytes of SHA-256("fencehttp/owner\n" + owner) in lower-case hex.
// The owner token itself can release and renew the lease, so it never
// leaves the holder; a digest still lets the receiver tell two owners of
// one fence apart (a fence repeated after a database restore).
func OwnerID(owner string) string {
	sum := sha256.Sum256([]byte("fencehttp/owner\n" + owner))
	return hex.EncodeToString(sum[:16])
}

// mac is HMAC-SHA256 over the three fields. Newlines separate them
// unambiguously: a lease name cannot contain a control character
// (fence.ValidateName), and fence and owner id are digits and hex.
func mac(key []byte, lease, fenceDigits, owner string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("fencehttp/v1\n" + lease + "\n" + fenceDigits + "\n" + owner))
	return m.Sum(nil)
}

// Transport signs the fence of the token in each request's context
// (fence.TokenFrom, as inside a fence.Run job, or WithToken) into the
// Fence-Token header, and, when the context names a step (WithStep) and
// the request has no Idempotency-Key, adds one derived from the lease, the
// step, the method and the URL: the same for every fence, so a newer
// holder's retry of the step gets the first outcome. A request without a
// token is sent unchanged. A refusal comes back as a response; read it
// with CheckResponse.
type Transport struct {
	// Base is the underlying transport; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Key is the HMAC key shared with the receiving service, at least
	// MinKeyLen bytes. A request that carries a token fails without it
	// rather than go out unsigned.
	Key []byte
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
	v, err := Sign(t.Key, tok)
	if err != nil {
		if r.Body != nil {
			r.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, err
	}
	r = r.Clone(r.Context()) // a RoundTripper must not modify the caller's request
	r.Header.Set(HeaderFence, v)
	if k, ok := defaultKey(tok, r); ok && r.Header.Get(HeaderIdempotencyKey) == "" {
		r.Header.Set(HeaderIdempotencyKey, k)
	}
	return base.RoundTrip(r)
}

// Client returns an *http.Client whose Transport signs fences with key.
func Client(key []byte, base http.RoundTripper) *http.Client {
	return &http.Client{Transport: &Transport{Base: base, Key: key}}
}
