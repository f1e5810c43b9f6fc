package fencehttp

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fence"
)

// Errors of the receiving side. Each maps to one HTTP status.
var (
	// ErrNoFence: the request has no Fence-Token header (428).
	ErrNoFence = errors.New("fencehttp: missing " + HeaderFence + " header")
	// ErrSignature: the MAC does not match (403): a forged or altered
	// fence, a token of another lease, or a different key.
	ErrSignature = errors.New("fencehttp: fence signature does not match")
	// ErrFull: a Memory checker is at capacity and will not forget a fence
	// to make room (503).
	ErrFull = errors.New("fencehttp: fence memory is full")
)

// Malformed headers wrap fence.ErrInvalid (400); a fence below the highest
// seen wraps fence.ErrStale (412, never 409: see problem.go).

// Claim is a fence whose signature a Verifier has checked.
type Claim struct {
	Lease string // chosen by the server, not sent by the client
	Fence int64
	Owner string // owner id: a digest of the holder's owner token
}

// Verifier checks the Fence-Token header of a request against the lease
// the server says guards it.
type Verifier struct {
	key      []byte
	lease    func(*http.Request) string
	maxAhead time.Duration
	now      func() time.Time
}

// DefaultMaxAhead is how far past this server's clock a fence may be. A
// fence is max(previous + 1, the database clock in microseconds) (ADR
// 0004), so a real one runs ahead of the clock only by the database's skew
// and by acquisitions faster than one per microsecond.
const DefaultMaxAhead = time.Hour

// SetMaxAhead sets how far ahead of this server's clock, read as
// microseconds since 1970, a fence may be before Verify refuses it as
// forged (403): a holder of the signing key could otherwise sign fence
// 2^63-1, and every guard that accepted it would refuse every real holder
// for good. 0 turns the bound off (for fences that are not clock-derived,
// such as a lease table raised past the clock on purpose). Call it before
// serving.
func (v *Verifier) SetMaxAhead(d time.Duration) { v.maxAhead = d }

// NewVerifier returns a Verifier for key (the one the holder side signs
// with, at least MinKeyLen bytes). lease names the lease that guards a
// request; it is server configuration or a function of the request the
// server trusts (the route, not a client header), and it must return a
// valid lease name: an empty or invalid one refuses the request with 500.
func NewVerifier(key []byte, lease func(r *http.Request) string) (*Verifier, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if lease == nil {
		return nil, fmt.Errorf("%w: fencehttp: NewVerifier needs a lease function", fence.ErrInvalid)
	}
	return &Verifier{key: append([]byte(nil), key...), lease: lease, maxAhead: DefaultMaxAhead, now: time.Now}, nil
}

// errLeaseFunc marks a bad name from the server's own lease function.
var errLeaseFunc = errors.New("fencehttp: the server's lease function")

// Verify parses and authenticates r's Fence-Token header. Parsing is
// strict: exactly one header, a decimal fence with no sign, leading zeros
// or spaces that fits int64, and lower-case hex owner id and MAC of the
// exact lengths Sign writes.
func (v *Verifier) Verify(r *http.Request) (Claim, error) {
	vals := r.Header.Values(HeaderFence)
	switch {
	case len(vals) == 0:
		return Claim{}, ErrNoFence
	case len(vals) > 1:
		return Claim{}, fmt.Errorf("%w: fencehttp: %s header sent %d times, want once", fence.ErrInvalid, HeaderFence, len(vals))
	}
	f, digits, owner, sum, err := parse(vals[0])
	if err != nil {
		return Claim{}, err
	}
	lease := v.lease(r)
	if err := fence.ValidateName(lease); err != nil {
		return Claim{}, fmt.Errorf("%w returned an unusable lease name: %v", errLeaseFunc, err)
	}
	if !hmac.Equal(sum, mac(v.key, lease, digits, owner)) {
		return Claim{}, fmt.Errorf("%w for lease %q (forged or altered, signed for another lease, or signed with another key)", ErrSignature, lease)
	}
	if v.maxAhead > 0 {
		limit := v.now().Add(v.maxAhead).UnixMicro()
		if f > limit {
			return Claim{}, fmt.Errorf("%w for lease %q: fence %d is more than %s ahead of this server's clock (%d): no acquisition hands it out, so its signer forged it", ErrSignature, lease, f, v.maxAhead, limit)
		}
	}
	return Claim{Lease: lease, Fence: f, Owner: owner}, nil
}

func parse(s string) (f int64, digits, owner string, sum []byte, err error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: fencehttp: %s %q: %s; want FENCE.OWNER.MAC as written by fencehttp.Sign (is the client's Transport given the key?)", fence.ErrInvalid, HeaderFence, clip(s), why)
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return 0, "", "", nil, bad(fmt.Sprintf("%d dot-separated parts, want 3", len(parts)))
	}
	digits, owner, macHex := parts[0], parts[1], parts[2]
	if digits == "" || len(digits) > 19 || digits[0] == '0' || strings.ContainsFunc(digits, notDigit) {
		return 0, "", "", nil, bad("the fence is not a positive decimal integer without sign, spaces or leading zeros")
	}
	f, perr := strconv.ParseInt(digits, 10, 64)
	if perr != nil {
		return 0, "", "", nil, bad("the fence does not fit in 64 bits")
	}
	if len(owner) != 32 || strings.ContainsFunc(owner, notHex) {
		return 0, "", "", nil, bad("the owner id is not 32 lower-case hex digits")
	}
	if len(macHex) != 64 || strings.ContainsFunc(macHex, notHex) {
		return 0, "", "", nil, bad("the MAC is not 64 lower-case hex digits")
	}
	sum, _ = hex.DecodeString(macHex)
	return f, digits, owner, sum, nil
}

func notDigit(r rune) bool { return r < '0' || r > '9' }
func notHex(r rune) bool   { return notDigit(r) && (r < 'a' || r > 'f') }

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

type claimKey struct{}

// ClaimFrom returns the verified claim of the request being handled by a
// Memory or Guard handler.
func ClaimFrom(ctx context.Context) (Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(Claim)
	return c, ok
}

func withClaim(r *http.Request, c Claim) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), claimKey{}, c))
}

// refuse writes err as the problem that says what the client can do
// (problem.go).
func refuse(w http.ResponseWriter, err error) { writeProblem(w, problemOf(err), err.Error()) }
