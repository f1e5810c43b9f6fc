package fencetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

func holderCases() []suiteCase {
	return []suiteCase{
		{"HolderNamedInHeldErrorGetAndList", holderNamed},
		{"HolderOfTakeoverReplacesExpiredOne", holderTakeover},
		{"HolderRecordedWithRuns", holderRuns},
		{"HolderClearedByRevokeAndRaise", holderCleared},
		{"HolderBadNameRefusedAndNothingWritten", holderBadName},
		{"HolderOfOldRowIsEmpty", holderOldRow},
	}
}

// holderNamed: a refused acquire names the holder, not its owner token, and
// changes nothing; Get and List show the name.
func holderNamed(t *testing.T, b Backend) {
	p := prefix()
	web1 := b.Open(t, p, fence.WithHolder("web-1:42"))
	web2 := b.Open(t, p, fence.WithHolder("web-2:7"))
	ctx := ctxT(t)
	if web1.Holder() != "web-1:42" {
		t.Fatalf("Holder() = %q", web1.Holder())
	}
	a := mustAcquire(t, web1, "admin:reconciliation", long)
	_, err := web2.Acquire(ctx, "admin:reconciliation", long)
	var he *fence.HeldError
	if !errors.As(err, &he) {
		t.Fatalf("second store's acquire: %v; want ErrHeld", err)
	}
	if he.Holder != "web-1:42" || he.Fence != a.Fence {
		t.Fatalf("HeldError %+v, want holder web-1:42 fence %d", he, a.Fence)
	}
	want := fmt.Sprintf(`fence: lease "admin:reconciliation" is held by "web-1:42" (fence %d) for another `, a.Fence)
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("message %q, want prefix %q", err, want)
	}
	if strings.Contains(err.Error(), a.Owner) || strings.Contains(err.Error(), a.Owner[:8]) {
		t.Fatalf("message shows the holder's owner token: %q", err)
	}
	// The refusal wrote nothing: the holder, its name and its fence stay.
	for _, s := range []*fence.Store{web1, web2} {
		info, err := s.Get(ctx, "admin:reconciliation")
		if err != nil || info.Holder != "web-1:42" || info.Owner != a.Owner || info.Fence != a.Fence || info.State != fence.StateHeld {
			t.Fatalf("Get after the refused acquire: %+v, %v", info, err)
		}
	}
	mustAcquire(t, web2, "other", long)
	ls, err := web1.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range ls {
		got[l.Name] = l.Holder
	}
	if len(got) != 2 || got["admin:reconciliation"] != "web-1:42" || got["other"] != "web-2:7" {
		t.Fatalf("List holders %v", got)
	}
	// A release keeps the name of the last holder, as it keeps its owner.
	if err := web1.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if info, err := web2.Get(ctx, "admin:reconciliation"); err != nil || info.State != fence.StateReleased || info.Holder != "web-1:42" {
		t.Fatalf("after release: %+v, %v", info, err)
	}
}

// holderTakeover: once web-1's lease lapses, web-2 takes it over and the
// row names web-2.
func holderTakeover(t *testing.T, b Backend) {
	p := prefix()
	web1 := b.Open(t, p, fence.WithHolder("web-1:42"))
	web2 := b.Open(t, p, fence.WithHolder("web-2:7"))
	ctx := ctxT(t)
	a := mustAcquire(t, web1, "job", 200*time.Millisecond)
	var bt fence.Token
	for bt.IsZero() {
		l, err := web2.Acquire(ctx, "job", long)
		var he *fence.HeldError
		switch {
		case err == nil:
			bt = l.Token
		case errors.As(err, &he):
			if he.Holder != "web-1:42" {
				t.Fatalf("while web-1 holds it: %v", err)
			}
			time.Sleep(he.Remaining + time.Millisecond) // until the lapse the database reported
		default:
			t.Fatal(err)
		}
	}
	wantAbove(t, "takeover", bt.Fence, a.Fence)
	info, err := web1.Get(ctx, "job")
	if err != nil || info.Holder != "web-2:7" || info.Fence != bt.Fence {
		t.Fatalf("after takeover: %+v, %v", info, err)
	}
	_, err = web1.Acquire(ctx, "job", long)
	var he *fence.HeldError
	if !errors.As(err, &he) || he.Holder != "web-2:7" {
		t.Fatalf("web-1 after the takeover: %v; want held by web-2:7", err)
	}
}

// holderRuns: a run records the holder of the token that started it, and
// keeps it after the lease changes hands.
func holderRuns(t *testing.T, b Backend) {
	p := prefix()
	web1 := b.Open(t, p, fence.WithHolder("web-1:42"))
	web2 := b.Open(t, p, fence.WithHolder("web-2:7"))
	ctx := ctxT(t)
	a := mustAcquire(t, web1, "job", long)
	id1, err := web1.StartRun(ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := web1.FinishRun(ctx, a, id1, fence.Completion{}); err != nil {
		t.Fatal(err)
	}
	if err := web1.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	bt := mustAcquire(t, web2, "job", long)
	// The store that starts the run does not matter: the token's lease row
	// names its holder.
	id2, err := web1.StartRun(ctx, bt, nil)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := web2.GetRun(ctx, id1)
	if err != nil || r1.Holder != "web-1:42" {
		t.Fatalf("run %d: %+v, %v; want holder web-1:42", id1, r1, err)
	}
	rs, err := web2.Runs(ctx, fence.RunFilter{Lease: "job"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ID != id2 || rs[0].Holder != "web-2:7" || rs[1].ID != id1 || rs[1].Holder != "web-1:42" {
		t.Fatalf("runs %+v; want %d by web-2:7, %d by web-1:42", rs, id2, id1)
	}
}

// holderCleared: a revoked lease has no holder (the run ledger keeps who
// held it); nor has a lease whose fence a raise moved.
func holderCleared(t *testing.T, b Backend) {
	s := b.Open(t, prefix(), fence.WithHolder("web-1:42"))
	ctx := ctxT(t)
	a := mustAcquire(t, s, "revoked", long)
	id, err := s.StartRun(ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	revokedAt, err := s.Revoke(ctx, "revoked")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Get(ctx, "revoked"); err != nil || info.State != fence.StateRevoked || info.Holder != "" || info.Owner != "" {
		t.Fatalf("after revoke: %+v, %v", info, err)
	}
	if r, err := s.GetRun(ctx, id); err != nil || r.Holder != "web-1:42" {
		t.Fatalf("the revoked generation's run: %+v, %v", r, err)
	}
	r := mustAcquire(t, s, "raised", long)
	// An explicit floor: the clock floor may equal a fence taken in the
	// same millisecond (SQLite), which a raise leaves alone.
	rep, err := s.RaiseFences(ctx, max(r.Fence, revokedAt)+1)
	if err != nil {
		t.Fatal(err)
	}
	reported := false
	for _, l := range rep.Leases {
		if l.Name == "raised" {
			reported = true
			if l.Holder != "web-1:42" {
				t.Fatalf("raise report: %+v; want the holder before the raise", l)
			}
		}
	}
	if !reported {
		t.Fatalf("raise did not report lease raised: %+v", rep)
	}
	if info, err := s.Get(ctx, "raised"); err != nil || info.State != fence.StateRevoked || info.Holder != "" {
		t.Fatalf("after raise: %+v, %v", info, err)
	}
}

// holderBadName: a name that cannot be shown as it is, or does not fit, is
// refused before anything is written.
func holderBadName(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	for _, bad := range []string{
		"",
		strings.Repeat("h", fence.MaxHolderLen+1),
		"web-1\x00",
		"web-1\n",
		"web-1\x1b[31m",
		"web-1\u0085",     // C1 next line
		"web-\u202e1-bew", // right-to-left override
		"web\u200b-1",     // zero-width space
		"web-1\ufeff",
		"web-1\u2028",
		"web-\xff",
	} {
		s2, err := handleFor(s).reopen(fence.WithPrefix(s.Prefix()), fence.WithHolder(bad))
		if !errors.Is(err, fence.ErrInvalid) || s2 != nil {
			t.Fatalf("WithHolder(%q): %v; want ErrInvalid", bad, err)
		}
	}
	if ls, err := s.List(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("a refused store wrote %v, %v", ls, err)
	}
	// At the limit, and beyond ASCII, is fine.
	for _, good := range []string{strings.Repeat("h", fence.MaxHolderLen), "wörker-1:42 (eu-west)", strings.Repeat("é", fence.MaxHolderLen/2)} {
		s2, err := handleFor(s).reopen(fence.WithPrefix(s.Prefix()), fence.WithHolder(good))
		if err != nil {
			t.Fatalf("WithHolder(%q): %v", good, err)
		}
		mustAcquire(t, s2, "good", long)
		info, err := s.Get(ctx, "good")
		if err != nil || info.Holder != good {
			t.Fatalf("holder %q read back as %q, %v", good, info.Holder, err)
		}
		if _, err := s.Revoke(ctx, "good"); err != nil {
			t.Fatal(err)
		}
	}
}

// holderOldRow: a row acquired before schema v3 (or by a fence that did
// not record a name) has holder "": it still refuses, with a message that
// says the holder is unnamed.
func holderOldRow(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	if h := s.Holder(); h == "" || !strings.Contains(h, ":") {
		t.Fatalf("default holder %q, want host:pid", h)
	}
	a := mustAcquire(t, s, "old", long)
	if info, err := s.Get(ctx, "old"); err != nil || info.Holder != s.Holder() {
		t.Fatalf("default holder stored as %+v, %v", info, err)
	}
	if _, err := handleFor(s).exec(ctx, sqlf(s, "UPDATE "+s.Prefix()+"leases SET holder = '' WHERE lease_name = ?"), "old"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Acquire(ctx, "old", long)
	var he *fence.HeldError
	if !errors.As(err, &he) || he.Holder != "" || he.Fence != a.Fence {
		t.Fatalf("acquire of an old row: %v", err)
	}
	if want := fmt.Sprintf(`is held by an unnamed holder (fence %d)`, a.Fence); !strings.Contains(err.Error(), want) {
		t.Fatalf("message %q, want %q", err, want)
	}
	if info, err := s.Get(ctx, "old"); err != nil || info.Holder != "" || info.State != fence.StateHeld {
		t.Fatalf("Get of an old row: %+v, %v", info, err)
	}
}
