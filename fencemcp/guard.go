package fencemcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fencekit/fence"
)

// Guard is the server side: it verifies a call's entry, asks the Checker
// whether its epoch is current, and hands the claim to the tool handler.
type Guard struct {
	v *Verifier
	c Checker
}

// NewGuard returns a Guard. c may be nil to verify signatures only (the
// tool's writes then carry the whole fence: LeaseChecker.InTx, ExecResource).
func NewGuard(v *Verifier, c Checker) (*Guard, error) {
	if v == nil {
		return nil, fmt.Errorf("%w: fencemcp: NewGuard needs a Verifier", fence.ErrInvalid)
	}
	return &Guard{v: v, c: c}, nil
}

// Admit verifies and checks a call of tool whose _meta entry is raw (nil
// when absent) and whose Fence-Token header values are header (nil over
// stdio). It returns ctx carrying the claim (ClaimFrom), or a refusal.
func (g *Guard) Admit(ctx context.Context, raw any, tool string, header []string) (context.Context, error) {
	c, err := g.v.Verify(raw, tool, header)
	if err != nil {
		return ctx, err
	}
	if g.c != nil {
		if err := g.c.Check(ctx, c); err != nil {
			return ctx, err
		}
	}
	return WithClaim(ctx, c), nil
}

// Refusal is what a refused call's result carries under RefusalKey.
type Refusal struct {
	Reason string `json:"reason"` // superseded, forged, missing, malformed, unavailable
	Retry  bool   `json:"retry"`  // true only for unavailable
	Lease  string `json:"lease,omitempty"`
	Fence  string `json:"fence,omitempty"`
	Step   string `json:"step,omitempty"`
}

// Refuse classifies err as a refusal. ok is false for an error that is not
// one of fencemcp's (the tool's own failure).
func Refuse(err error) (r Refusal, ok bool) {
	switch {
	case err == nil:
		return Refusal{}, false
	case errors.Is(err, ErrSuperseded):
		r = Refusal{Reason: "superseded"}
		var se *SupersededError
		if errors.As(err, &se) {
			r.Lease, r.Fence, r.Step = se.Claim.Lease, fmt.Sprint(se.Claim.Fence), se.Claim.Step
		}
	case errors.Is(err, ErrForged):
		r = Refusal{Reason: "forged"}
	case errors.Is(err, ErrNoFence):
		r = Refusal{Reason: "missing"}
	case errors.Is(err, ErrUnavailable):
		r = Refusal{Reason: "unavailable", Retry: true}
	case errors.Is(err, fence.ErrInvalid):
		r = Refusal{Reason: "malformed"}
	default:
		return Refusal{}, false
	}
	return r, true
}

// Text is the tool-error text of a refusal: it starts with what the client
// (or the model reading it) must do.
func (r Refusal) Text(err error) string {
	switch r.Reason {
	case "superseded":
		return "superseded, do not retry: " + err.Error()
	case "unavailable":
		return "fence check unavailable, retry later: " + err.Error()
	default:
		return "refused, do not retry: " + err.Error()
	}
}

// RefusalFrom reads the refusal entry of a result's _meta (as a map of the
// SDK's), if the server refused the call.
func RefusalFrom(meta map[string]any) (Refusal, bool) {
	raw, ok := meta[RefusalKey]
	if !ok {
		return Refusal{}, false
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return Refusal{}, false
	}
	var r Refusal
	if json.Unmarshal(b, &r) != nil || r.Reason == "" {
		return Refusal{}, false
	}
	return r, true
}
