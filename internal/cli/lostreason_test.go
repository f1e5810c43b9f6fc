package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// When the store could not read why a token was refused in its short grace
// (a loaded machine, a pool reconnecting after SIGSTOP), fence run reads
// again before it prints the reason: seen in CI as "no longer holds the
// lease" where the newer fence was known a moment later.
func TestLostReasonReadsAgainWhenUnknown(t *testing.T) {
	ctx := context.Background()
	s, err := fencedsn.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "l.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := s.Acquire(ctx, "story", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	unknown := func(tok fence.Token) fence.Result {
		return fence.Result{Token: tok, Err: &fence.LostError{Lease: tok.Lease, Fence: tok.Fence, Reason: fence.LostUnknown, Op: "renew"}}
	}
	app := &app{}

	// Still ours: nothing better to say than unknown.
	if why, _ := app.lostReason(ctx, s, unknown(a.Token)); why != fmt.Sprintf("lease story fence %d no longer holds the lease", a.Token.Fence) {
		t.Errorf("lease still held: %q", why)
	}

	revoked, err := s.Revoke(ctx, "story")
	if err != nil {
		t.Fatal(err)
	}
	if why, _ := app.lostReason(ctx, s, unknown(a.Token)); why != fmt.Sprintf("lease story fence %d revoked (fence is now %d)", a.Token.Fence, revoked) {
		t.Errorf("after a revoke: %q", why)
	}
	b, err := s.Acquire(ctx, "story", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if why, _ := app.lostReason(ctx, s, unknown(a.Token)); why != fmt.Sprintf("lease story fence %d superseded by fence %d", a.Token.Fence, b.Token.Fence) {
		t.Errorf("after a takeover: %q", why)
	}
	if err := s.Release(ctx, b.Token); err != nil {
		t.Fatal(err)
	}
	if why, _ := app.lostReason(ctx, s, unknown(b.Token)); why != fmt.Sprintf("lease story fence %d was released", b.Token.Fence) {
		t.Errorf("after a release: %q", why)
	}
}
