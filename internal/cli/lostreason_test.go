package cli

import (
	"context"
	"encoding/json"
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

// Terms of leadership that Elect recorded are listed by 'fence runs' as
// kind "term", runs as kind "run".
func TestRunsListsTerms(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	s, err := fencedsn.Open(ctx, dsn, fence.WithHolder("leader-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ectx, cancel := context.WithCancel(ctx)
	_ = fence.Elect(ectx, s, "controller", fence.ElectionCallbacks{OnStartedLeading: func(context.Context, fence.Token) { cancel() }})
	cancel()
	res, err := fence.Run(ctx, s, "job", func(context.Context) error { return nil })
	if err != nil || res.Outcome != fence.Completed {
		t.Fatal(res, err)
	}
	code, out, errs := mainIn(t, []string{"FENCE_DSN=" + dsn}, "", "runs", "--json")
	if code != 0 {
		t.Fatalf("fence runs --json: %d %s", code, errs)
	}
	var runs []runJSON
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Kind != "run" || runs[1].Kind != "term" || runs[1].Holder != "leader-1" || runs[1].Lease != "controller" {
		t.Errorf("fence runs --json: %s", out)
	}
}
