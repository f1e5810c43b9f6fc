package fencetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

// The database can go back in time: a restore from an older dump, or the
// promotion of an asynchronous replica that missed the last commits, rolls
// the lease table back. Fences handed out before the rollback are still out
// there (in a downstream row that ExecResource guards, in a Fence-Token
// header), so the next fence must be above all of them. Each case snapshots
// the lease table, hands fences out, puts the snapshot back, and checks what
// the next acquisition gets (docs/adr/0004-fence-floor.md).
func rollbackCases() []suiteCase {
	return []suiteCase{
		{"RollbackOfReleasedRowFenceNotReused", rollbackReleased},
		{"RollbackOfMissingRowFenceNotReused", rollbackMissing},
		{"RollbackRaiseFencesRevokesRestoredHolder", rollbackRaise},
		{"RaiseFencesFloorAndValidation", raiseFences},
	}
}

// snapshot copies the lease table aside, as a dump would, and returns the
// function that restores it: the rows of the copy replace the table's.
// Only the lease table goes back: the resource table stands for another
// database, which the rollback does not touch.
func snapshot(t testing.TB, s *fence.Store) (restore func()) {
	t.Helper()
	ctx := ctxT(t)
	h := handleFor(s)
	leases, snap := s.Prefix()+"leases", s.Prefix()+"leases_snap"
	if _, err := h.exec(ctx, "CREATE TABLE "+snap+" AS SELECT * FROM "+leases); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.exec(context.Background(), "DROP TABLE IF EXISTS "+snap) })
	return func() {
		t.Helper()
		for _, q := range []string{"DELETE FROM " + leases, "INSERT INTO " + leases + " SELECT * FROM " + snap} {
			if _, err := h.exec(ctx, q); err != nil {
				t.Fatalf("restore: %s: %v", q, err)
			}
		}
	}
}

// wantAbove fails unless fence got is strictly above every fence in before.
func wantAbove(t testing.TB, what string, got int64, before ...int64) {
	t.Helper()
	for _, b := range before {
		if got <= b {
			t.Fatalf("%s: fence %d, not above %d handed out before (all before: %v)", what, got, b, before)
		}
	}
}

// wantFloor fails unless fence f is at least the database clock, in
// microseconds, read before the call that made it.
func wantFloor(t testing.TB, s *fence.Store, what string, f int64, before time.Time) {
	t.Helper()
	if floor := before.UnixMicro(); f < floor {
		t.Fatalf("%s: fence %d below the database clock %d µs", what, f, floor)
	}
}

func dbNow(t testing.TB, s *fence.Store) time.Time {
	t.Helper()
	n, err := s.Now(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// resourceWrite is ExecResource on row 1 of tbl, storing val and the fence.
func resourceWrite(t testing.TB, s *fence.Store, tbl string, tok fence.Token, val string) error {
	t.Helper()
	q := "UPDATE " + tbl + " SET val = ?, fence_token = {{fence_token}} WHERE id = 1 AND fence_token <= {{fence_token}}"
	if s.Dialect() == fence.Postgres {
		q = "UPDATE " + tbl + " SET val = $1, fence_token = {{fence_token}} WHERE id = 1 AND fence_token <= {{fence_token}}"
	}
	_, err := handleFor(s).execResource(ctxT(t), tok, q, val)
	return err
}

// The lease was released when the dump was taken. A acquires after it and
// writes downstream; the database goes back to the dump; B acquires. On
// the old rule (fence + 1) A and B both got fence 2, and ExecResource,
// which accepts an equal fence so a holder can write twice, let the older
// owner A overwrite B.
func rollbackReleased(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	tbl := items(t, s)
	x := mustAcquire(t, s, "job", long)
	if err := s.Release(ctx, x); err != nil {
		t.Fatal(err)
	}
	restore := snapshot(t, s)

	a := mustAcquire(t, s, "job", long)
	if err := resourceWrite(t, s, tbl, a, "A"); err != nil {
		t.Fatal(err)
	}
	// A's lease is revoked before the rollback, so that the restored table
	// has only the released row and B is not simply refused as ErrHeld.
	r, err := s.Revoke(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	restore()

	before := dbNow(t, s)
	bt := mustAcquire(t, s, "job", long)
	wantAbove(t, "first acquisition after the rollback", bt.Fence, x.Fence, a.Fence, r)
	wantFloor(t, s, "first acquisition after the rollback", bt.Fence, before)
	if err := resourceWrite(t, s, tbl, bt, "B"); err != nil {
		t.Fatalf("B's resource write: %v", err)
	}
	err = resourceWrite(t, s, tbl, a, "stale A")
	if !errors.Is(err, fence.ErrStale) || !errors.Is(err, fence.ErrLost) {
		t.Fatalf("A's resource write after B's: %v; want ErrStale", err)
	}
	if v := val(t, s, tbl, 1); v != "B" {
		t.Fatalf("resource row %q, want B's", v)
	}
}

// The lease did not exist when the dump was taken: its whole history is
// lost, and the next acquisition inserts the row again. On the old rule
// the insert started again at fence 1.
func rollbackMissing(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	restore := snapshot(t, s)
	var handed []int64
	a := mustAcquire(t, s, "job", long)
	handed = append(handed, a.Fence)
	r, err := s.Revoke(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	handed = append(handed, r)
	a2 := mustAcquire(t, s, "job", long)
	handed = append(handed, a2.Fence)
	restore()
	if _, err := s.Get(ctx, "job"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("after the restore the row should be gone: %v", err)
	}
	bt := mustAcquire(t, s, "job", long)
	wantAbove(t, "acquisition of a row the rollback removed", bt.Fence, handed...)
	if _, err := s.Renew(ctx, a2, long); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("the pre-rollback holder's renew: %v; want ErrLost", err)
	}
}

// The dump was taken while A held the lease with a long TTL. After the dump
// the lease was revoked and B acquired it. The restored table says A holds
// it again: A's stale token passes the database's own checks, which no
// floor on new fences can prevent. RaiseFences is the operator's remedy:
// every restored holder is revoked and every fence is above the floor.
func rollbackRaise(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	restore := snapshot(t, s)
	r, err := s.Revoke(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	bt := mustAcquire(t, s, "job", long)
	restore()
	if ok, err := s.IsHeld(ctx, a); err != nil || !ok {
		t.Fatalf("the restored table should show A as holder (the hazard this case is about): %v %v", ok, err)
	}

	before := dbNow(t, s)
	raised, err := s.RaiseFences(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantFloor(t, s, "raise floor", raised.Floor, before)
	wantAbove(t, "raise floor", raised.Floor, a.Fence, r, bt.Fence)
	if len(raised.Leases) != 1 || raised.Leases[0].Name != "job" || raised.Leases[0].Fence != a.Fence ||
		raised.Leases[0].Owner != a.Owner || raised.Leases[0].State != fence.StateHeld {
		t.Fatalf("raised %+v; want job as restored, held by A at fence %d", raised.Leases, a.Fence)
	}
	_, err = s.Renew(ctx, a, long)
	wantLost(t, err, fence.LostRevoked, raised.Floor)
	info, err := s.Get(ctx, "job")
	if err != nil || info.Fence != raised.Floor || info.State != fence.StateRevoked || info.Owner != "" {
		t.Fatalf("after raise: %+v %v", info, err)
	}
	n := mustAcquire(t, s, "job", long)
	wantAbove(t, "acquisition after the raise", n.Fence, raised.Floor, bt.Fence)
}

// RaiseFences moves only fences below the floor, sets them to the floor
// exactly, leaves newer ones alone, and refuses floors that would not be
// exact in JSON.
func raiseFences(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	held := mustAcquire(t, s, "held", long)
	rel := mustAcquire(t, s, "released", long)
	if err := s.Release(ctx, rel); err != nil {
		t.Fatal(err)
	}
	// A floor explicitly above the clock, as an operator whose restored
	// server's clock is behind would give with --to.
	floor := dbNow(t, s).Add(time.Hour).UnixMicro()
	got, err := s.RaiseFences(ctx, floor)
	if err != nil {
		t.Fatal(err)
	}
	if got.Floor != floor || len(got.Leases) != 2 || got.Leases[0].Name != "held" || got.Leases[1].Name != "released" ||
		got.Leases[0].Fence != held.Fence || got.Leases[1].Fence != rel.Fence || got.Leases[1].State != fence.StateReleased {
		t.Fatalf("raise to %d: %+v", floor, got)
	}
	_, err = s.Renew(ctx, held, long)
	wantLost(t, err, fence.LostRevoked, floor)
	for _, name := range []string{"held", "released"} {
		if info, err := s.Get(ctx, name); err != nil || info.Fence != floor || info.State != fence.StateRevoked {
			t.Fatalf("%s after raise: %+v %v", name, info, err)
		}
	}
	// The next acquisition continues above the raised fence even though
	// the clock is an hour behind it.
	n := mustAcquire(t, s, "held", long)
	if n.Fence != floor+1 {
		t.Fatalf("acquisition after a raise above the clock: fence %d, want %d", n.Fence, floor+1)
	}
	// A second raise to the clock finds nothing below it: the raised rows
	// are an hour ahead, and n is held and must stay held.
	again, err := s.RaiseFences(ctx, 0)
	if err != nil || len(again.Leases) != 0 || again.Floor >= floor {
		t.Fatalf("raise to the clock after a raise above it: %+v %v", again, err)
	}
	if ok, err := s.IsHeld(ctx, n); err != nil || !ok {
		t.Fatalf("a lease above the floor was touched: %v %v", ok, err)
	}
	for _, bad := range []int64{-1, 1 << 53, 1<<63 - 1} {
		if _, err := s.RaiseFences(ctx, bad); !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("floor %d: %v; want ErrInvalid", bad, err)
		}
	}
	if ok, err := s.IsHeld(ctx, n); err != nil || !ok {
		t.Fatalf("a refused raise changed something: %v %v", ok, err)
	}
}
