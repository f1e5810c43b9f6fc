package postgres

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

func mustStart(t *testing.T, d *Driver, tok driver.TokenParams, detail string) int64 {
	t.Helper()
	id, ok, err := d.RunStart(context.Background(), driver.StartRunParams{Token: tok, Detail: detail})
	if err != nil || !ok {
		t.Fatalf("RunStart(%+v) = %d, %v, %v", tok, id, ok, err)
	}
	return id
}

func mustRun(t *testing.T, d *Driver, id int64) driver.Run {
	t.Helper()
	r, ok, err := d.RunGet(context.Background(), id)
	if err != nil || !ok {
		t.Fatalf("RunGet(%d) = %v, %v", id, ok, err)
	}
	return r
}

func TestRunStartAndFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	tok := acquire(t, d, "job", time.Minute)

	id := mustStart(t, d, tok, `{"phase":"scan"}`)
	r := mustRun(t, d, id)
	if r.ID != id || r.Lease != "job" || r.Owner != tok.Owner || r.Fence != tok.Fence || r.Status != driver.RunRunning ||
		r.StartedAtMs <= 0 || r.FinishedAtMs != 0 || r.Result != `{"phase":"scan"}` || r.Error != "" || r.ExitCode != nil {
		t.Fatalf("started run = %+v", r)
	}
	if _, ok, err := d.RunGet(ctx, id+1000); err != nil || ok {
		t.Errorf("RunGet(absent) = %v, %v", ok, err)
	}

	// Invalid tokens start nothing.
	for _, bad := range []driver.TokenParams{
		tokenParams("job", owner(t), tok.Fence),
		tokenParams("job", tok.Owner, tok.Fence+1),
		tokenParams("absent", tok.Owner, tok.Fence),
	} {
		if id, ok, err := d.RunStart(ctx, driver.StartRunParams{Token: bad}); err != nil || ok || id != 0 {
			t.Errorf("RunStart(%+v) = %d, %v, %v", bad, id, ok, err)
		}
	}

	// Finish with the wrong token, run or fence: nothing changes.
	code := int64(3)
	fin := func(p driver.FinishRunParams) bool {
		ok, err := d.RunFinish(ctx, p)
		if err != nil {
			t.Fatalf("RunFinish(%+v): %v", p, err)
		}
		return ok
	}
	for _, p := range []driver.FinishRunParams{
		{ID: id, Token: tokenParams("job", owner(t), tok.Fence), Status: driver.RunSucceeded},
		{ID: id, Token: tokenParams("job", tok.Owner, tok.Fence+1), Status: driver.RunSucceeded},
		{ID: id + 1000, Token: tok, Status: driver.RunSucceeded},
	} {
		if fin(p) {
			t.Errorf("RunFinish(%+v) succeeded", p)
		}
	}
	if r := mustRun(t, d, id); r.Status != driver.RunRunning {
		t.Fatalf("run after refused finishes = %+v", r)
	}

	// The right token: succeeded, with result and exit code; only once.
	if !fin(driver.FinishRunParams{ID: id, Token: tok, Status: driver.RunSucceeded, Result: `{"fixed":3}`, ExitCode: &code}) {
		t.Fatal("RunFinish with the valid token refused")
	}
	r = mustRun(t, d, id)
	if r.Status != driver.RunSucceeded || r.Result != `{"fixed":3}` || r.ExitCode == nil || *r.ExitCode != 3 ||
		r.FinishedAtMs < r.StartedAtMs || r.Error != "" {
		t.Errorf("finished run = %+v", r)
	}
	if fin(driver.FinishRunParams{ID: id, Token: tok, Status: driver.RunFailed, Error: "again"}) {
		t.Error("second RunFinish succeeded")
	}

	// Failed, with an empty result: the start detail stays.
	id2 := mustStart(t, d, tok, `{"phase":"two"}`)
	if !fin(driver.FinishRunParams{ID: id2, Token: tok, Status: driver.RunFailed, Error: "boom"}) {
		t.Fatal("RunFinish failed refused")
	}
	if r := mustRun(t, d, id2); r.Status != driver.RunFailed || r.Error != "boom" || r.Result != `{"phase":"two"}` || r.ExitCode != nil {
		t.Errorf("failed run = %+v", r)
	}

	// After a takeover the old token can neither start nor finish.
	id3 := mustStart(t, d, tok, "")
	if _, _, err := d.LeaseRevoke(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if fin(driver.FinishRunParams{ID: id3, Token: tok, Status: driver.RunSucceeded}) {
		t.Error("RunFinish after revoke succeeded")
	}
	if _, ok, _ := d.RunStart(ctx, driver.StartRunParams{Token: tok}); ok {
		t.Error("RunStart after revoke succeeded")
	}
	// An expired token neither.
	short := acquire(t, d, "short", time.Minute)
	id4 := mustStart(t, d, short, "")
	expireNow(t, d, "short")
	if fin(driver.FinishRunParams{ID: id4, Token: short, Status: driver.RunSucceeded}) {
		t.Error("RunFinish after expiry succeeded")
	}
	if r := mustRun(t, d, id4); r.Status != driver.RunRunning || r.Result != "" {
		t.Errorf("refused finish changed the run: %+v", r)
	}
}

func TestRunStartAbandonsOlderGenerations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	old := acquire(t, d, "job", time.Minute)
	oldRun := mustStart(t, d, old, "")
	oldRun2 := mustStart(t, d, old, "")
	otherLease := mustStart(t, d, acquire(t, d, "other", time.Minute), "")
	done := mustStart(t, d, old, "")
	if ok, _ := d.RunFinish(ctx, driver.FinishRunParams{ID: done, Token: old, Status: driver.RunSucceeded}); !ok {
		t.Fatal("finish")
	}
	if _, _, err := d.LeaseRevoke(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	cur := acquire(t, d, "job", time.Minute)
	newRun := mustStart(t, d, cur, "")
	for id, want := range map[int64]string{
		oldRun: driver.RunAbandoned, oldRun2: driver.RunAbandoned, otherLease: driver.RunRunning,
		done: driver.RunSucceeded, newRun: driver.RunRunning,
	} {
		r := mustRun(t, d, id)
		if r.Status != want {
			t.Errorf("run %d = %s, want %s", id, r.Status, want)
		}
		if want == driver.RunAbandoned && r.FinishedAtMs < r.StartedAtMs {
			t.Errorf("abandoned run %d finished at %d", id, r.FinishedAtMs)
		}
	}
	// A second run of the same generation abandons nothing.
	mustStart(t, d, cur, "")
	if r := mustRun(t, d, newRun); r.Status != driver.RunRunning {
		t.Errorf("run of the same generation = %s", r.Status)
	}
}

func TestRunMarkLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	tok := acquire(t, d, "job", time.Minute)
	id := mustStart(t, d, tok, "")
	if ok, err := d.RunMarkLost(ctx, id, tok.Fence+1, "x"); err != nil || ok {
		t.Errorf("RunMarkLost(wrong fence) = %v, %v", ok, err)
	}
	// No guard: the token may already be invalid.
	if _, _, err := d.LeaseRevoke(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if ok, err := d.RunMarkLost(ctx, id, tok.Fence, "renew refused"); err != nil || !ok {
		t.Fatalf("RunMarkLost = %v, %v", ok, err)
	}
	if r := mustRun(t, d, id); r.Status != driver.RunLost || r.Error != "renew refused" || r.FinishedAtMs == 0 {
		t.Errorf("lost run = %+v", r)
	}
	if ok, _ := d.RunMarkLost(ctx, id, tok.Fence, "again"); ok {
		t.Error("second RunMarkLost succeeded")
	}
}

func TestRunSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	if n, err := d.RunSweep(ctx); err != nil || n != 0 {
		t.Fatalf("sweep of nothing = %d, %v", n, err)
	}
	valid := mustStart(t, d, acquire(t, d, "valid", time.Minute), "")
	expired := mustStart(t, d, acquire(t, d, "expired", time.Minute), "")
	expireNow(t, d, "expired")
	relTok := acquire(t, d, "released", time.Minute)
	released := mustStart(t, d, relTok, "")
	if ok, _ := d.LeaseRelease(ctx, relTok); !ok {
		t.Fatal("release")
	}
	revoked := mustStart(t, d, acquire(t, d, "revoked", time.Minute), "")
	if _, _, err := d.LeaseRevoke(ctx, "revoked"); err != nil {
		t.Fatal(err)
	}
	finTok := acquire(t, d, "finished", time.Minute)
	finished := mustStart(t, d, finTok, "")
	if ok, _ := d.RunFinish(ctx, driver.FinishRunParams{ID: finished, Token: finTok, Status: driver.RunSucceeded}); !ok {
		t.Fatal("finish")
	}
	expireNow(t, d, "finished")
	// A run whose lease row is gone (deleted outside fence).
	var orphan int64
	if err := d.queryRowT(t, `INSERT INTO {{prefix}}runs (lease_name, owner_token, fence_token, status, started_at_ms)
		VALUES ('gone', 'o', 1, 'running', {{now_ms}}) RETURNING run_id`).Scan(&orphan); err != nil {
		t.Fatal(err)
	}

	n, err := d.RunSweep(ctx)
	if err != nil || n != 4 {
		t.Fatalf("sweep = %d, %v; want 4", n, err)
	}
	for id, want := range map[int64]string{
		valid: driver.RunRunning, expired: driver.RunLost, released: driver.RunLost,
		revoked: driver.RunLost, finished: driver.RunSucceeded, orphan: driver.RunLost,
	} {
		r := mustRun(t, d, id)
		if r.Status != want {
			t.Errorf("run %d (%s) = %s, want %s", id, r.Lease, r.Status, want)
		}
		if want == driver.RunLost && (r.FinishedAtMs == 0 || r.Error == "") {
			t.Errorf("swept run = %+v", r)
		}
	}
	if n, err := d.RunSweep(ctx); err != nil || n != 0 {
		t.Errorf("second sweep = %d, %v", n, err)
	}
}

// The sweep judges a generation only after locking its lease row, so a renew
// in flight is waited for and seen rather than its run being swept.
func TestRunSweepWaitsForRenewInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	// A renew that has the row but has not committed: done by hand in a
	// transaction so that it can be held open across the expiry. The start
	// and the renew must come before a short lease lapses: on a loaded
	// machine they may not, and the lease is taken again with twice the TTL.
	var (
		id, committed int64
		tx            *sql.Tx
	)
	for ttl := 200 * time.Millisecond; ; ttl *= 2 {
		if ttl > time.Minute {
			t.Fatalf("the lease lapsed before the renew at every TTL up to %v", ttl/2)
		}
		tok := acquire(t, d, "job", ttl)
		var ok bool
		var err error
		if id, ok, err = d.RunStart(ctx, driver.StartRunParams{Token: tok}); err != nil {
			t.Fatal(err)
		} else if !ok {
			continue
		}
		committed = mustGet(t, d, "job").LeasedUntilMs
		if tx, err = d.db.BeginTx(ctx, nil); err != nil {
			t.Fatal(err)
		}
		var until int64
		err = tx.QueryRowContext(ctx, d.q.renew, tok.Name, tok.Owner, tok.Fence, int64(60_000)).Scan(&until, new(int64))
		if err == nil && until != 0 {
			break
		}
		tx.Rollback()
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("renew in transaction: %v", err)
		}
	}
	defer tx.Rollback()
	waitDBPast(t, d, committed+1) // the committed row has expired
	solo, pid := soloDriver(t, d)
	done := make(chan struct{})
	var n int64
	var serr error
	go func() {
		defer close(done)
		n, serr = solo.RunSweep(ctx)
	}()
	waitLocked(t, d.db, pid)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	<-done
	if serr != nil || n != 0 {
		t.Errorf("sweep behind a renew = %d, %v; want 0", n, serr)
	}
	if r := mustRun(t, d, id); r.Status != driver.RunRunning {
		t.Errorf("run = %s", r.Status)
	}
}

func TestRunList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	if rs, err := d.RunList(ctx, driver.RunFilter{}); err != nil || len(rs) != 0 {
		t.Fatalf("empty list = %v, %v", rs, err)
	}
	a := acquire(t, d, "a", time.Minute)
	b := acquire(t, d, "b", time.Minute)
	var ids []int64
	for i := range 6 {
		tok := a
		if i%2 == 1 {
			tok = b
		}
		ids = append(ids, mustStart(t, d, tok, ""))
	}
	if ok, _ := d.RunFinish(ctx, driver.FinishRunParams{ID: ids[0], Token: a, Status: driver.RunSucceeded}); !ok {
		t.Fatal("finish")
	}
	idsOf := func(f driver.RunFilter) []int64 {
		rs, err := d.RunList(ctx, f)
		if err != nil {
			t.Fatalf("RunList(%+v): %v", f, err)
		}
		var out []int64
		for _, r := range rs {
			if (f.Lease != "" && r.Lease != f.Lease) || (f.Status != "" && r.Status != f.Status) {
				t.Errorf("RunList(%+v) returned %+v", f, r)
			}
			out = append(out, r.ID)
		}
		return out
	}
	eq := func(got []int64, want ...int64) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i] != want[i] {
				return false
			}
		}
		return true
	}
	if got := idsOf(driver.RunFilter{}); !eq(got, ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]) {
		t.Errorf("all, newest first = %v (started %v)", got, ids)
	}
	if got := idsOf(driver.RunFilter{Lease: "a"}); !eq(got, ids[4], ids[2], ids[0]) {
		t.Errorf("lease a = %v", got)
	}
	if got := idsOf(driver.RunFilter{Lease: "a", Status: driver.RunRunning}); !eq(got, ids[4], ids[2]) {
		t.Errorf("lease a running = %v", got)
	}
	if got := idsOf(driver.RunFilter{Status: driver.RunSucceeded}); !eq(got, ids[0]) {
		t.Errorf("succeeded = %v", got)
	}
	if got := idsOf(driver.RunFilter{Limit: 2}); !eq(got, ids[5], ids[4]) {
		t.Errorf("limit 2 = %v", got)
	}
	if got := idsOf(driver.RunFilter{Lease: "b", Limit: 1}); !eq(got, ids[5]) {
		t.Errorf("lease b limit 1 = %v", got)
	}
	if got := idsOf(driver.RunFilter{Lease: "absent"}); len(got) != 0 {
		t.Errorf("absent lease = %v", got)
	}
}
