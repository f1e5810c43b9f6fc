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
