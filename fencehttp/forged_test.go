package fencehttp

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/teststore"
)

// A holder of the signing key signs fence 2^63-1: before, Verify accepted
// it and every guard that raised its row to it refused each real holder
// from then on (412 for ever).
func TestVerifierRefusesFenceFarAheadOfTheClock(t *testing.T) {
	v, err := NewVerifier(testKey, func(*http.Request) string { return "publisher" })
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, c := range []struct {
		fence int64
		ok    bool
	}{
		{7, true},
		{now.UnixMicro(), true},
		{now.Add(DefaultMaxAhead / 2).UnixMicro(), true},
		{now.Add(2 * DefaultMaxAhead).UnixMicro(), false},
		{math.MaxInt64, false},
	} {
		h, err := Sign(testKey, fence.Token{Lease: "publisher", Owner: "owner-a", Fence: c.fence})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set(HeaderFence, h)
		_, err = v.Verify(r)
		if c.ok && err != nil || !c.ok && !errors.Is(err, ErrSignature) {
			t.Errorf("fence %d: %v (want accepted: %v)", c.fence, err, c.ok)
		}
		if !c.ok && problemOf(err) != ProblemSignature {
			t.Errorf("fence %d: problem %s, want %s", c.fence, problemOf(err), ProblemSignature)
		}
	}
	v.SetMaxAhead(0)
	h, _ := Sign(testKey, fence.Token{Lease: "publisher", Owner: "owner-a", Fence: math.MaxInt64})
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set(HeaderFence, h)
	if _, err := v.Verify(r); err != nil {
		t.Errorf("bound off: %v", err)
	}
}

// With CheckLeases the Guard refuses a fence above the lease's current one
// (and any fence of a lease never acquired), and accepts the current one.
func TestGuardCheckLeasesRefusesFenceAboveTheLease(t *testing.T) {
	for _, b := range teststore.Backends {
		t.Run(b.Name, func(t *testing.T) {
			e := newGuardEnv(t, b, nil, nil)
			s := b.Open(t)
			e.g.CheckLeases(s)
			ctx := context.Background()
			l, err := s.Acquire(ctx, "publisher", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if code, _ := e.do("publisher", l.Token.Fence+1, l.Token.Owner, "forged", ""); code != http.StatusForbidden {
				t.Errorf("fence above the lease's: %d, want 403", code)
			}
			if code, _ := e.do("never", 5, l.Token.Owner, "forged", ""); code != http.StatusForbidden {
				t.Errorf("lease never acquired: %d, want 403", code)
			}
			if code, body := e.do("publisher", l.Token.Fence, l.Token.Owner, "real", ""); code != http.StatusOK {
				t.Errorf("the holder's fence: %d %s, want 200", code, body)
			}
		})
	}
}

// SignClaim is Sign without the owner token: a verified claim re-signed
// under another key verifies there as the same claim, and Sign is SignClaim
// of the token's owner id. A claim that could not have come from a holder
// is not signed.
func TestSignClaimRelaysAVerifiedClaim(t *testing.T) {
	tok := fence.Token{Lease: "publisher", Fence: 7, Owner: "9f2c4e0b6a1d8e3f5c7b9a0d2e4f6a8c"}
	h, err := Sign(testKey, tok)
	if err != nil {
		t.Fatal(err)
	}
	c := Claim{Lease: tok.Lease, Fence: tok.Fence, Owner: OwnerID(tok.Owner)}
	if hc, err := SignClaim(testKey, c); err != nil || hc != h {
		t.Fatalf("SignClaim = %q, %v; Sign = %q", hc, err, h)
	}
	other := []byte("another service's key, 32 bytes!")
	relayed, err := SignClaim(other, c)
	if err != nil {
		t.Fatal(err)
	}
	if relayed == h {
		t.Fatal("the claim signed under another key is the same header")
	}
	v, err := NewVerifier(other, func(*http.Request) string { return "publisher" })
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set(HeaderFence, relayed)
	if got, err := v.Verify(r); err != nil || got != c {
		t.Fatalf("Verify of the relayed claim = %+v, %v; want %+v", got, err, c)
	}
	r.Header.Set(HeaderFence, h) // signed under testKey: forged for this service
	if _, err := v.Verify(r); err == nil {
		t.Fatal("a header signed under the first key verified under the second")
	}
	for _, bad := range []Claim{
		{Lease: "publisher", Fence: 0, Owner: c.Owner},
		{Lease: "publisher", Fence: 7, Owner: tok.Owner[:31]},
		{Lease: "publisher", Fence: 7, Owner: "9F2C4E0B6A1D8E3F5C7B9A0D2E4F6A8C"},
		{Lease: "", Fence: 7, Owner: c.Owner},
	} {
		if _, err := SignClaim(other, bad); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("SignClaim(%+v) = %v, want fence.ErrInvalid", bad, err)
		}
	}
	if _, err := SignClaim(other[:31], c); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("SignClaim with a 31-byte key = %v, want fence.ErrInvalid", err)
	}
}
