package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

func TestAcquireLifecycle(t *testing.T) {
	t.Parallel()
	forEachAcquirePath(t, func(t *testing.T, force int) {
		ctx := context.Background()
		d := newDriver(t)
		d.hints.Force = force

		// Absent: inserted at the database clock in microseconds (the floor
		// below which no new fence goes), for exactly the TTL of one instant.
		a := owner(t)
		before := now(t, d)
		r, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: a, Holder: "web-1:42", TTLMs: 60_000})
		if err != nil || !r.Acquired || r.Holder != nil {
			t.Fatalf("acquire absent = %+v, %v", r, err)
		}
		newFence(t, "absent", r.Fence, 0, before)
		t1 := r.Fence
		if r.LeasedUntilMs-r.NowMs != 60_000 {
			t.Errorf("leased_until - now = %d, want the TTL", r.LeasedUntilMs-r.NowMs)
		}
		l := mustGet(t, d, "job")
		if l.Owner != a || l.Holder != "web-1:42" || l.Fence != t1 || l.State != driver.StateHeld || l.LeasedUntilMs != r.LeasedUntilMs ||
			l.AcquiredAtMs != r.NowMs || l.UpdatedAtMs != r.NowMs || l.NowMs < r.NowMs {
			t.Errorf("row after acquire = %+v (result %+v)", l, r)
		}

		// Held: refused, and the holder comes back in the same round trip. Not
		// re-entrant: the holder's own owner token is refused too.
		for _, o := range []string{owner(t), a} {
			r, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: o, Holder: "web-2:7", TTLMs: 1000})
			if err != nil || r.Acquired {
				t.Fatalf("acquire held = %+v, %v", r, err)
			}
			h := r.Holder
			if h == nil || h.Name != "job" || h.Owner != a || h.Holder != "web-1:42" || h.Fence != t1 || h.State != driver.StateHeld ||
				h.LeasedUntilMs != l.LeasedUntilMs || h.AcquiredAtMs != l.AcquiredAtMs || h.NowMs != r.NowMs || h.NowMs >= h.LeasedUntilMs {
				t.Fatalf("holder = %+v", h)
			}
		}

		// Released: the row stays and the next acquisition continues the fence.
		if ok, err := d.LeaseRelease(ctx, tokenParams("job", a, t1)); err != nil || !ok {
			t.Fatalf("release = %v, %v", ok, err)
		}
		before = now(t, d)
		t2 := acquire(t, d, "job", time.Minute)
		newFence(t, "after release", t2.Fence, t1, before)

		// Revoked: revoke bumps the fence, the next acquisition bumps it again.
		before = now(t, d)
		f3, ok, err := d.LeaseRevoke(ctx, "job")
		if err != nil || !ok {
			t.Fatalf("revoke = %d, %v, %v", f3, ok, err)
		}
		newFence(t, "revoke", f3, t2.Fence, before)
		before = now(t, d)
		t4 := acquire(t, d, "job", 100*time.Millisecond)
		newFence(t, "after revoke", t4.Fence, f3, before)

		// Expired by the database clock: taken over by someone else.
		time.Sleep(150 * time.Millisecond)
		before = now(t, d)
		t5 := acquire(t, d, "job", time.Minute)
		newFence(t, "after expiry", t5.Fence, t4.Fence, before)

		// A fence already above the clock (after a raise ahead of it) goes on
		// at +1: the floor never lowers a fence.
		ahead := (before + 3_600_000) * 1000
		d.execT(t, `UPDATE {{prefix}}leases SET fence_token = $1, leased_until_ms = 0 WHERE lease_name = 'job'`, ahead)
		if t6 := acquire(t, d, "job", time.Minute); t6.Fence != ahead+1 {
			t.Fatalf("fence after %d = %d, want +1", ahead, t6.Fence)
		}
		if f, ok, err := d.LeaseRevoke(ctx, "job"); err != nil || !ok || f != ahead+2 {
			t.Fatalf("revoke after %d = %d, %v, %v; want +1", ahead+1, f, ok, err)
		}
		t5 = acquire(t, d, "job", time.Minute)
		l = mustGet(t, d, "job")
		if l.Owner != t5.Owner || l.State != driver.StateHeld {
			t.Errorf("row after takeover = %+v", l)
		}
		var renews int64
		if err := d.queryRowT(t, `SELECT renew_count FROM {{prefix}}leases WHERE lease_name = 'job'`).Scan(&renews); err != nil || renews != 0 {
			t.Errorf("renew_count after acquire = %d, %v", renews, err)
		}
	})
}

// A refused acquire of a held lease must not reach the upsert: ON CONFLICT
// DO UPDATE … WHERE false still locks the row (sets xmax) and writes WAL.
func TestRefusedAcquireDoesNotLockTheRow(t *testing.T) {
	t.Parallel()
	forEachAcquirePath(t, func(t *testing.T, force int) {
		ctx := context.Background()
		d := newDriver(t)
		d.hints.Force = force
		acquire(t, d, "job", time.Minute)
		xmax := func() string {
			var x string
			if err := d.queryRowT(t, `SELECT xmax::text FROM {{prefix}}leases WHERE lease_name = 'job'`).Scan(&x); err != nil {
				t.Fatal(err)
			}
			return x
		}
		before := xmax()
		for range 3 {
			if r, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: owner(t), TTLMs: 1000}); err != nil || r.Acquired {
				t.Fatalf("acquire held = %+v, %v", r, err)
			}
		}
		if after := xmax(); after != before {
			t.Errorf("refused acquire changed xmax %s -> %s: it locked the row", before, after)
		}
		// The probe can see a lock: the naive upsert does set xmax.
		d.execT(t, `INSERT INTO {{prefix}}leases AS l (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms)
			VALUES ('job', 'x', 1, 'held', 0, 0, 0) ON CONFLICT (lease_name) DO UPDATE SET owner_token = 'x' WHERE false`)
		if after := xmax(); after == before {
			t.Errorf("the xmax probe did not see the naive upsert's lock")
		}
	})
}

func TestRenewReleaseIsHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	tok := acquire(t, d, "job", time.Minute)
	acquire(t, d, "other", time.Minute)
	before := mustGet(t, d, "job")

	wrong := []driver.TokenParams{
		tokenParams("job", owner(t), tok.Fence),    // wrong owner
		tokenParams("job", tok.Owner, tok.Fence+1), // wrong fence
		tokenParams("job", tok.Owner, tok.Fence-1),
		tokenParams("other", tok.Owner, tok.Fence), // wrong lease
		tokenParams("absent", tok.Owner, tok.Fence),
	}
	for _, w := range wrong {
		if ok, err := d.LeaseIsHeld(ctx, w); err != nil || ok {
			t.Errorf("is-held %+v = %v, %v", w, ok, err)
		}
		// A refused renew reports no time: its plain UPDATE returns no row
		// (the caller reads the row to say why, as on MySQL).
		r, err := d.LeaseRenew(ctx, w, 120_000)
		if err != nil || r.Renewed || r.LeasedUntilMs != 0 {
			t.Errorf("renew %+v = %+v, %v", w, r, err)
		}
		if ok, err := d.LeaseRelease(ctx, w); err != nil || ok {
			t.Errorf("release %+v = %v, %v", w, ok, err)
		}
	}
	if after := mustGet(t, d, "job"); after.LeasedUntilMs != before.LeasedUntilMs || after.State != driver.StateHeld {
		t.Fatalf("wrong tokens changed the row: %+v -> %+v", before, after)
	}

	if ok, err := d.LeaseIsHeld(ctx, tok); err != nil || !ok {
		t.Fatalf("is-held = %v, %v", ok, err)
	}
	for i := range 2 {
		r, err := d.LeaseRenew(ctx, tok, 120_000)
		if err != nil || !r.Renewed {
			t.Fatalf("renew = %+v, %v", r, err)
		}
		if d := r.LeasedUntilMs - r.NowMs; d < 120_000 || d > 120_001 {
			t.Errorf("renewed to now+%d, want now+120000", d)
		}
		l := mustGet(t, d, "job")
		if l.LeasedUntilMs != r.LeasedUntilMs || l.UpdatedAtMs != r.NowMs || l.AcquiredAtMs != before.AcquiredAtMs || l.Fence != tok.Fence {
			t.Errorf("row after renew = %+v (result %+v)", l, r)
		}
		var n int64
		if err := d.queryRowT(t, `SELECT renew_count FROM {{prefix}}leases WHERE lease_name = 'job'`).Scan(&n); err != nil || n != int64(i+1) {
			t.Errorf("renew_count = %d, %v", n, err)
		}
	}
	// A shorter TTL shortens the lease: renew sets, it does not extend by.
	r, err := d.LeaseRenew(ctx, tok, 5_000)
	if err != nil || !r.Renewed || r.LeasedUntilMs-r.NowMs > 5_001 {
		t.Fatalf("renew shorter = %+v, %v", r, err)
	}

	if ok, err := d.LeaseRelease(ctx, tok); err != nil || !ok {
		t.Fatalf("release = %v, %v", ok, err)
	}
	l := mustGet(t, d, "job")
	if l.State != driver.StateReleased || l.LeasedUntilMs != 0 || l.Owner != tok.Owner || l.Fence != tok.Fence {
		t.Errorf("row after release = %+v", l)
	}
	if ok, err := d.LeaseRelease(ctx, tok); err != nil || ok {
		t.Errorf("second release = %v, %v", ok, err)
	}
	if ok, err := d.LeaseIsHeld(ctx, tok); err != nil || ok {
		t.Errorf("is-held after release = %v, %v", ok, err)
	}
	if r, err := d.LeaseRenew(ctx, tok, 1000); err != nil || r.Renewed {
		t.Errorf("renew after release = %+v, %v", r, err)
	}
}

func TestExpiryByDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	tok := acquire(t, d, "job", 150*time.Millisecond)
	r := mustGet(t, d, "job")
	// Held unless the database clock is already past the expiry: a loaded
	// machine can take longer than the TTL between two statements, and the
	// database then rightly says no.
	if ok, err := d.LeaseIsHeld(ctx, tok); err != nil {
		t.Fatal(err)
	} else if !ok {
		if now, err := d.Now(ctx); err != nil || now < r.LeasedUntilMs {
			t.Fatalf("not held at %d, before its expiry %d (%v)", now, r.LeasedUntilMs, err)
		}
	}
	// Wait until the database clock, not ours, is past the expiry.
	for {
		now, err := d.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now >= r.LeasedUntilMs {
			break
		}
		time.Sleep(time.Duration(r.LeasedUntilMs-now+1) * time.Millisecond)
	}
	if ok, err := d.LeaseIsHeld(ctx, tok); err != nil || ok {
		t.Errorf("is-held after expiry = %v, %v", ok, err)
	}
	if r, err := d.LeaseRenew(ctx, tok, 60_000); err != nil || r.Renewed {
		t.Errorf("renew after expiry = %+v, %v", r, err)
	}
	if ok, err := d.LeaseRelease(ctx, tok); err != nil || ok {
		t.Errorf("release after expiry = %v, %v", ok, err)
	}
	l := mustGet(t, d, "job")
	if l.State != driver.StateHeld || l.LeasedUntilMs > l.NowMs || l.LeasedUntilMs != r.LeasedUntilMs {
		t.Errorf("expired row = %+v", l)
	}
	// The expired holder's row is not the holder of a refused acquire.
	if r := mustAcquire(t, d, "job"); r.Fence <= tok.Fence {
		t.Errorf("takeover fence = %d", r.Fence)
	}
}

func mustAcquire(t testing.TB, d *Driver, name string) driver.TokenParams {
	t.Helper()
	return acquire(t, d, name, time.Minute)
}

func TestNowIsTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	a, err := d.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	b, err := d.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b-a < 20 || b-a > 5000 {
		t.Errorf("Now advanced %d ms over a 20 ms sleep", b-a)
	}
	// Same host here, so the clocks agree to well within a minute.
	if diff := time.Since(time.UnixMilli(b)); diff > time.Minute || diff < -time.Minute {
		t.Errorf("database clock is %v from ours", diff)
	}
}

// Inside a long transaction the guard must use the current time, not the
// transaction's start (now()), or an expired token would still pass.
func TestGuardUsesCurrentTimeInsideTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	tok, tx, until := acquireLocked(t, d, "job", 150*time.Millisecond)
	waitDBPast(t, d, until+1)
	var stale bool
	if err := tx.QueryRow(fmt.Sprintf(`SELECT leased_until_ms > (extract(epoch FROM now()) * 1000)::bigint FROM %sleases`, d.prefix)).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	if !stale {
		t.Fatal("test premise: now() should still be before the expiry inside the transaction")
	}
	if ok, err := d.LockTx(ctx, tx, tok); err != nil || ok {
		t.Errorf("LockTx after expiry inside the transaction = %v, %v", ok, err)
	}
}

func TestRevoke(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	if f, ok, err := d.LeaseRevoke(ctx, "absent"); err != nil || ok || f != 0 {
		t.Fatalf("revoke absent = %d, %v, %v", f, ok, err)
	}
	if _, ok, _ := d.LeaseGet(ctx, "absent"); ok {
		t.Fatal("revoke created a row")
	}
	tok := acquire(t, d, "job", time.Minute)
	f, ok, err := d.LeaseRevoke(ctx, "job")
	if err != nil || !ok || f <= tok.Fence {
		t.Fatalf("revoke = %d, %v, %v", f, ok, err)
	}
	l := mustGet(t, d, "job")
	if l.Owner != "" || l.State != driver.StateRevoked || l.LeasedUntilMs != 0 || l.Fence != f {
		t.Errorf("row after revoke = %+v", l)
	}
	if ok, _ := d.LeaseIsHeld(ctx, tok); ok {
		t.Error("revoked token is held")
	}
	if r, _ := d.LeaseRenew(ctx, tok, 1000); r.Renewed {
		t.Error("revoked token renewed")
	}
	// The revoked generation's number is never handed out.
	f2, _, _ := d.LeaseRevoke(ctx, "job")
	if f2 <= f {
		t.Errorf("second revoke = %d after %d", f2, f)
	}
	if t2 := mustAcquire(t, d, "job"); t2.Fence <= f2 {
		t.Errorf("acquire after revokes = %d, want above %d", t2.Fence, f2)
	}
}

func TestGetAndList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	if ls, now, err := d.LeaseList(ctx, driver.LeaseFilter{}); err != nil || len(ls) != 0 || now <= 0 {
		t.Fatalf("empty list = %v, %d, %v", ls, now, err)
	}
	if _, ok, err := d.LeaseGet(ctx, "absent"); err != nil || ok {
		t.Fatalf("get absent = %v, %v", ok, err)
	}
	// Byte-wise order: upper case before lower case, 'é' (0xC3…) after 'z'.
	names := []string{"b", "a", "B", "é", "z", "a:b/c#1@x"}
	for _, n := range names {
		acquire(t, d, n, time.Minute)
	}
	ls, now, err := d.LeaseList(ctx, driver.LeaseFilter{})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names) // Go compares strings byte-wise
	if len(ls) != len(names) {
		t.Fatalf("list has %d rows", len(ls))
	}
	for i, l := range ls {
		if l.Name != names[i] || l.NowMs != now || l.Fence <= 0 || l.LeasedUntilMs <= now {
			t.Errorf("list[%d] = %+v, want %q at %d", i, l, names[i], now)
		}
	}
}

func TestRenewBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	if rs, err := d.LeaseRenewBatch(ctx, nil, 1000); err != nil || len(rs) != 0 {
		t.Fatalf("empty batch = %v, %v", rs, err)
	}
	a := acquire(t, d, "a", time.Minute)
	b := acquire(t, d, "b", time.Minute)
	expired := acquire(t, d, "expired", 50*time.Millisecond)
	released := acquire(t, d, "released", time.Minute)
	if ok, _ := d.LeaseRelease(ctx, released); !ok {
		t.Fatal("release")
	}
	time.Sleep(100 * time.Millisecond)
	batch := []driver.TokenParams{
		b,
		tokenParams("a", a.Owner, a.Fence+1), // wrong fence
		expired,
		a,
		released,
		tokenParams("absent", a.Owner, 1),
		tokenParams("b", owner(t), b.Fence), // wrong owner
		a,                                   // duplicate of a valid token
	}
	want := []bool{true, false, false, true, false, false, false, true}
	rs, err := d.LeaseRenewBatch(ctx, batch, 90_000)
	if err != nil || len(rs) != len(batch) {
		t.Fatalf("batch = %v, %v", rs, err)
	}
	for i, r := range rs {
		if r.Renewed != want[i] {
			t.Errorf("batch[%d] %+v renewed = %v, want %v", i, batch[i], r.Renewed, want[i])
		}
		if r.Renewed && (r.LeasedUntilMs-r.NowMs < 90_000 || r.LeasedUntilMs-r.NowMs > 90_001) {
			t.Errorf("batch[%d] renewed to now+%d", i, r.LeasedUntilMs-r.NowMs)
		}
		if !r.Renewed && (r.LeasedUntilMs != 0 || r.NowMs <= 0) {
			t.Errorf("batch[%d] refused = %+v", i, r)
		}
	}
	var n int64
	if err := d.queryRowT(t, `SELECT renew_count FROM {{prefix}}leases WHERE lease_name = 'a'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("duplicate token renewed the row %d times, %v", n, err)
	}
	if l := mustGet(t, d, "expired"); l.LeasedUntilMs > l.NowMs {
		t.Error("batch revived an expired lease")
	}
}

// 10,000 tokens in one statement; every other one stale.
func TestRenewBatchLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	const n = 10_000
	d.execT(t, `INSERT INTO {{prefix}}leases (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms)
		SELECT 'lease-' || i, 'owner-' || i, 3, 'held', {{now_ms}} + 60000, 0, 0 FROM generate_series(1, $1::int) AS i`, n)
	ts := make([]driver.TokenParams, n)
	for i := range ts {
		f := int64(3)
		if i%2 == 1 {
			f = 2
		}
		ts[i] = tokenParams(fmt.Sprintf("lease-%d", n-i), fmt.Sprintf("owner-%d", n-i), f)
	}
	start := time.Now()
	rs, err := d.LeaseRenewBatch(ctx, ts, 120_000)
	took := time.Since(start)
	if err != nil || len(rs) != n {
		t.Fatalf("batch = %d results, %v", len(rs), err)
	}
	for i, r := range rs {
		if r.Renewed != (i%2 == 0) {
			t.Fatalf("result %d (%+v) renewed = %v", i, ts[i], r.Renewed)
		}
	}
	t.Logf("renewed %d of %d tokens in one statement in %v", n/2, n, took)
	var renewed int
	if err := d.queryRowT(t, `SELECT count(*) FROM {{prefix}}leases WHERE renew_count = 1`).Scan(&renewed); err != nil || renewed != n/2 {
		t.Errorf("%d rows renewed, %v", renewed, err)
	}
}

// A renew or release that waits for the row (a fenced transaction holds it
// FOR SHARE) must judge validity after the wait, not before it: the plain
// UPDATE judges before, and PostgreSQL does not re-check after a wait for a
// lock whose holder only locked the row. Past the expiry it is refused and
// changes nothing; within it, it goes ahead (the re-check after the wait
// passes without the fallback, or the fallback renews).
func TestRenewAfterLockWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []lockWaitCase{
		{"renew past expiry", false, true, false},
		{"release past expiry", true, true, false},
		{"renew within", false, false, true},
		{"release within", true, false, true},
	} {
		for _, cancellable := range []bool{false, true} {
			name := tc.name
			if cancellable {
				// queryRow's other path (rawRow: the statement on the
				// connection's own *pgx.Conn).
				name += " cancellable context"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				renewAfterLockWait(t, tc, cancellable)
			})
		}
	}
}

// The fast statements alone, without the driver's fallback: after a lock
// wait that moved the clock past their verdict, lease_renew.sql and
// lease_release.sql re-read the expiry (lease_until, schema version 4) and
// go ahead while the lease is valid, and fail with the marker once it has
// lapsed. A re-read that returned nothing would send every such wait down
// the slower fallback, which TestRenewAfterLockWait cannot tell apart.
func TestRecheckAfterWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []lockWaitCase{
		{"renew within", false, false, true},
		{"release within", true, false, true},
		{"renew past expiry", false, true, false},
		{"release past expiry", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := newDriver(t)
			ttl := 3 * time.Second
			if !tc.pastExpiry {
				ttl = time.Minute
			}
			tok, tx, _ := acquireLocked(t, d, "job", ttl)
			before := mustGet(t, d, "job")
			result := waitingOp(t, d, func(solo *Driver) (bool, error) {
				if tc.release {
					_, err := solo.c.exec(ctx, solo.q.release, tok.Name, tok.Owner, tok.Fence)
					return err == nil, err
				}
				var until, at int64
				err := solo.c.queryRow(ctx, solo.q.renew, tok.Name, tok.Owner, tok.Fence, int64(60_000)).Scan(&until, &at)
				return err == nil, err
			})
			outlastVerdict(t, d, tc.pastExpiry, before.LeasedUntilMs)
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			_, err := result()
			if tc.wantSuccess && err != nil {
				t.Fatalf("within the lease, after the wait: %v", err)
			}
			if !tc.wantSuccess && !waitedPastExpiry(err) {
				t.Fatalf("past the expiry, after the wait: %v, want the marker %q", err, "fence: waited past expiry")
			}
		})
	}
}

// On a schema without lease_until (version 3: this version of fence
// running before Migrate, or before another migration tool applied 0004),
// renew and release still work, through their locked forms, and still
// refuse a token that does not hold the lease.
func TestRenewReleaseWithoutLeaseUntil(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t)
	d.execT(t, "DROP FUNCTION {{prefix}}lease_until(text)")
	d.execT(t, "DELETE FROM {{prefix}}schema WHERE version >= 4")
	d.execT(t, "DROP TABLE {{prefix}}task_effects") // 0006 runs again after 0004
	tok := acquire(t, d, "job", time.Minute)
	r, err := d.LeaseRenew(ctx, tok, 60_000)
	if err != nil || !r.Renewed || r.LeasedUntilMs-r.NowMs != 60_000 {
		t.Fatalf("renew without lease_until = %+v, %v", r, err)
	}
	stale := tok
	stale.Fence--
	if r, err := d.LeaseRenew(ctx, stale, 60_000); err != nil || r.Renewed {
		t.Fatalf("renew of a stale token without lease_until = %+v, %v; want refused", r, err)
	}
	if ok, err := d.LeaseRelease(ctx, stale); err != nil || ok {
		t.Fatalf("release of a stale token without lease_until = %v, %v; want refused", ok, err)
	}
	if ok, err := d.LeaseRelease(ctx, tok); err != nil || !ok {
		t.Fatalf("release without lease_until = %v, %v", ok, err)
	}
	if l := mustGet(t, d, "job"); l.State != driver.StateReleased {
		t.Fatalf("after release the row is %+v", l)
	}
	latest := d.q.migrations[len(d.q.migrations)-1].Version
	if v, err := d.Migrate(ctx); err != nil || v != latest {
		t.Fatalf("Migrate = %d, %v; want %d", v, err, latest)
	}
	tok = acquire(t, d, "job", time.Minute)
	var until, at int64
	if err := d.c.queryRow(ctx, d.q.renew, tok.Name, tok.Owner, tok.Fence, int64(60_000)).Scan(&until, &at); err != nil {
		t.Fatalf("the fast renew after Migrate: %v", err)
	}
}

// lease_until reads the row's expiry, NULL without a row.
func TestLeaseUntilFunction(t *testing.T) {
	d := newDriver(t)
	tok := acquire(t, d, "job", time.Minute)
	l := mustGet(t, d, tok.Name)
	var got sql.NullInt64
	if err := d.db.QueryRow("SELECT "+d.prefix+"lease_until($1)", "job").Scan(&got); err != nil || !got.Valid || got.Int64 != l.LeasedUntilMs {
		t.Fatalf("lease_until(job) = %v, %v; want %d", got, err, l.LeasedUntilMs)
	}
	if err := d.db.QueryRow("SELECT "+d.prefix+"lease_until($1)", "absent").Scan(&got); err != nil || got.Valid {
		t.Fatalf("lease_until(absent) = %v, %v; want NULL", got, err)
	}
}

type lockWaitCase struct {
	name        string
	release     bool
	pastExpiry  bool
	wantSuccess bool
}

// renewAfterLockWait is one case of TestRenewAfterLockWait, with a context
// that can be cancelled or not.
func renewAfterLockWait(t *testing.T, tc lockWaitCase, cancellable bool) {
	ctx := context.Background()
	if cancellable {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
	}
	d := newDriver(t)
	// Long enough for the renew to start and wait while the lease is
	// still valid, however loaded the machine.
	ttl := 3 * time.Second
	if !tc.pastExpiry {
		ttl = time.Minute
	}
	tok, tx, _ := acquireLocked(t, d, "job", ttl)
	before := mustGet(t, d, "job")
	result := waitingTokenOp(ctx, t, d, tok, tc.release)
	outlastVerdict(t, d, tc.pastExpiry, before.LeasedUntilMs)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ok, opErr := result()
	if opErr != nil || ok != tc.wantSuccess {
		t.Fatalf("after the wait = %v, %v; want %v", ok, opErr, tc.wantSuccess)
	}
	after := mustGet(t, d, "job")
	switch {
	case !tc.wantSuccess:
		if after.LeasedUntilMs != before.LeasedUntilMs || after.State != driver.StateHeld || after.UpdatedAtMs != before.UpdatedAtMs {
			t.Errorf("refused after the wait, but the row changed: %+v -> %+v", before, after)
		}
	case tc.release:
		if after.State != driver.StateReleased || after.LeasedUntilMs != 0 {
			t.Errorf("released, but the row is %+v", after)
		}
	default:
		if after.LeasedUntilMs-after.UpdatedAtMs != 60_000 || after.UpdatedAtMs <= before.UpdatedAtMs {
			t.Errorf("renewed, but the row is %+v (before %+v)", after, before)
		}
	}
}

// A renew or release that waits for the row while another transaction
// changes it (a takeover: revoke and acquire; or a revoke alone) is judged by
// PostgreSQL against the row as that transaction left it: refused when the
// transaction committed, done when it rolled back.
func TestRenewRacingTakeover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		release  bool
		takeover bool // revoke and acquire; else revoke only
		commit   bool
	}{
		{"renew/takeover committed", false, true, true},
		{"renew/takeover rolled back", false, true, false},
		{"renew/revoke committed", false, false, true},
		{"release/takeover committed", true, true, true},
		{"release/takeover rolled back", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := newDriver(t)
			tok := acquire(t, d, "job", time.Minute)
			tx, err := d.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, d.q.revoke, "job"); err != nil {
				t.Fatal(err)
			}
			if tc.takeover {
				var acquired bool
				if err := tx.QueryRowContext(ctx, d.q.acquire, "job", owner(t), int64(60_000), "thief").
					Scan(&acquired, new(any), new(any), new(any), new(any), new(any), new(any), new(any), new(any)); err != nil || !acquired {
					t.Fatalf("takeover in transaction = %v, %v", acquired, err)
				}
			}
			result := waitingTokenOp(ctx, t, d, tok, tc.release)
			if tc.commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			ok, opErr := result()
			if opErr != nil || ok == tc.commit {
				t.Fatalf("racing the takeover = %v, %v; want %v", ok, opErr, !tc.commit)
			}
			l := mustGet(t, d, "job")
			if tc.commit && (l.Fence <= tok.Fence || l.Owner == tok.Owner) {
				t.Errorf("the old token changed the row after the takeover: %+v", l)
			}
		})
	}
}

// Invariant 3 at the lease: an acquisition of an expired lease waits for a
// fenced transaction of the old generation that holds the row FOR SHARE.
func TestTakeoverWaitsForFencedTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDriver(t)
	tok, tx, until := acquireLocked(t, d, "job", 200*time.Millisecond)
	waitDBPast(t, d, until+1) // expired, but still share-locked
	solo, pid := soloDriver(t, d)
	done := make(chan struct{})
	var r driver.AcquireResult
	var aerr error
	go func() {
		defer close(done)
		r, aerr = solo.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: owner(t), TTLMs: 60_000})
	}()
	waitLocked(t, d.db, pid)
	stillRunning(t, done, 200*time.Millisecond, "takeover")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	<-done
	if aerr != nil || !r.Acquired || r.Fence <= tok.Fence {
		t.Errorf("takeover after the fenced transaction = %+v, %v", r, aerr)
	}
}

// 20 clients × 50 rounds contend for one name. Each round starts from a
// different state (absent, released, expired, revoked); exactly one client
// wins each round, with the next fence, and nobody gets an error.
func TestAcquireContention(t *testing.T) {
	t.Parallel()
	forEachAcquirePath(t, func(t *testing.T, force int) {
		ctx := context.Background()
		d := newDriver(t)
		d.hints.Force = force
		d.db.SetMaxOpenConns(40)
		// 15 rounds of 20 clients on each path: 1,200 contended acquisitions.
		// 50 rounds took 64 s per path under -race on two cores, the
		// postgres package's longest test by far, for no other shape.
		const clients, rounds = 20, 15
		var fence int64
		for round := range rounds {
			start := make(chan struct{})
			results := make(chan driver.AcquireResult, clients)
			errs := make(chan error, clients)
			owners := make([]string, clients)
			var wg sync.WaitGroup
			for c := range clients {
				owners[c] = owner(t)
				wg.Go(func() {
					<-start
					r, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "hot", Owner: owners[c], TTLMs: 60_000})
					if err != nil {
						errs <- err
						return
					}
					results <- r
				})
			}
			close(start)
			wg.Wait()
			close(results)
			close(errs)
			for err := range errs {
				t.Fatalf("round %d: acquire error: %v", round, err)
			}
			var (
				winners []driver.AcquireResult
				holders []int64
			)
			for r := range results {
				if r.Acquired {
					winners = append(winners, r)
				} else if r.Holder != nil {
					holders = append(holders, r.Holder.Fence)
				}
			}
			if len(winners) != 1 {
				t.Fatalf("round %d: %d winners: %+v", round, len(winners), winners)
			}
			if winners[0].Fence <= fence {
				t.Fatalf("round %d: winner fence %d, not above %d", round, winners[0].Fence, fence)
			}
			fence = winners[0].Fence
			for _, h := range holders {
				if h != fence {
					t.Errorf("round %d: holder reported with fence %d, want the winner's %d", round, h, fence)
				}
			}
			l := mustGet(t, d, "hot")
			if l.Fence != fence {
				t.Fatalf("round %d: row fence %d", round, l.Fence)
			}
			switch round % 3 {
			case 0:
				if ok, err := d.LeaseRelease(ctx, tokenParams("hot", l.Owner, l.Fence)); err != nil || !ok {
					t.Fatalf("release: %v %v", ok, err)
				}
			case 1: // expire it by the database clock without waiting a TTL
				d.execT(t, `UPDATE {{prefix}}leases SET leased_until_ms = {{now_ms}} - 1 WHERE lease_name = 'hot'`)
			case 2:
				f, _, err := d.LeaseRevoke(ctx, "hot")
				if err != nil {
					t.Fatal(err)
				}
				fence = f
			}
		}
	})
}

// Free-for-all: clients acquire, check, renew and release as fast as they can.
// Every fence is won by one client only, the row ends at the last fence
// won, and no call fails.
func TestAcquireReleaseStorm(t *testing.T) {
	t.Parallel()
	forEachAcquirePath(t, func(t *testing.T, force int) {
		ctx := context.Background()
		d := newDriver(t)
		d.hints.Force = force
		d.db.SetMaxOpenConns(40)
		const clients, attempts = 20, 50
		var mu sync.Mutex
		won := map[int64]string{}
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for range attempts {
					o := owner(t)
					r, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "storm", Owner: o, TTLMs: 60_000})
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					if !r.Acquired {
						continue
					}
					mu.Lock()
					if prev, dup := won[r.Fence]; dup {
						t.Errorf("fence %d won twice (%s, %s)", r.Fence, prev, o)
					}
					won[r.Fence] = o
					mu.Unlock()
					tok := tokenParams("storm", o, r.Fence)
					if rr, err := d.LeaseRenew(ctx, tok, 60_000); err != nil || !rr.Renewed {
						t.Errorf("winner could not renew: %+v %v", rr, err)
					}
					if ok, err := d.LeaseRelease(ctx, tok); err != nil || !ok {
						t.Errorf("winner could not release: %v %v", ok, err)
					}
				}
			})
		}
		wg.Wait()
		l := mustGet(t, d, "storm")
		if top := slices.Max(slices.Collect(maps.Keys(won))); l.Fence != top {
			t.Errorf("%d acquisitions, the last fence won %d, but the row has fence %d", len(won), top, l.Fence)
		}
		t.Logf("%d acquisitions among %d clients × %d attempts", len(won), clients, attempts)
	})
}

// The acquire statement's snapshot can be older than the row its upsert
// meets. An acquirer whose snapshot shows the lease absent or expired, racing
// an acquisition that is in flight, waits for it; then ON CONFLICT judges the
// latest row: refused (no error, holder unknown) if the other one committed,
// taken if it rolled back.
func TestAcquireRaceJudgesLatestRow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		prepare   func(t *testing.T, d *Driver)
		commit    bool
		wantTaken bool
	}{
		{"absent/committed", func(*testing.T, *Driver) {}, true, false},
		{"absent/rolled back", func(*testing.T, *Driver) {}, false, true},
		{"expired/committed", expireAfterAcquire, true, false},
		{"expired/rolled back", expireAfterAcquire, false, true},
		{"released/committed", releaseAfterAcquire, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := newDriver(t)
			tc.prepare(t, d)
			prev, _, err := d.LeaseGet(ctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			tx, err := d.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			// As LeaseAcquire does: the upsert for a name with no row.
			q := d.q.acquire
			if prev.Name == "" {
				q = d.q.acquireNew
			}
			var acquired bool
			if err := tx.QueryRowContext(ctx, q, "job", owner(t), int64(60_000), "web-1:42").
				Scan(&acquired, new(any), new(any), new(any), new(any), new(any), new(any), new(any), new(any)); err != nil || !acquired {
				t.Fatalf("acquire in transaction = %v, %v", acquired, err)
			}
			solo, pid := soloDriver(t, d)
			done := make(chan struct{})
			var r driver.AcquireResult
			var aerr error
			go func() {
				defer close(done)
				r, aerr = solo.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: owner(t), TTLMs: 60_000})
			}()
			waitLocked(t, d.db, pid)
			if tc.commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			<-done
			if aerr != nil {
				t.Fatalf("racing acquire: %v", aerr)
			}
			if !tc.wantTaken {
				if r.Acquired || r.Holder != nil {
					t.Errorf("racing acquire = %+v (holder %+v); want refused, holder unknown", r, r.Holder)
				}
			} else if !r.Acquired || r.Fence <= prev.Fence {
				t.Errorf("racing acquire = %+v; want a fence above the row's %d before the race", r, prev.Fence)
			}
		})
	}
}

func expireAfterAcquire(t *testing.T, d *Driver) {
	acquire(t, d, "job", time.Minute)
	d.execT(t, `UPDATE {{prefix}}leases SET leased_until_ms = {{now_ms}} - 1`)
}

func releaseAfterAcquire(t *testing.T, d *Driver) {
	tok := acquire(t, d, "job", time.Minute)
	if ok, err := d.LeaseRelease(context.Background(), tok); err != nil || !ok {
		t.Fatal(ok, err)
	}
}

// newFence fails unless f is a new fence: above prev and at least the
// database clock in microseconds read (as ms) before the call that made it.
func newFence(t testing.TB, what string, f, prev, beforeMs int64) {
	t.Helper()
	if f <= prev || f < beforeMs*1000 {
		t.Fatalf("%s: fence %d, want above %d and at least the clock %d µs", what, f, prev, beforeMs*1000)
	}
}

func now(t testing.TB, d *Driver) int64 {
	t.Helper()
	n, err := d.Now(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// forEachAcquirePath runs f with LeaseAcquire's first statement as the
// hints choose it (force 0) and forced to each path (driver.Hints.Force):
// every path must answer every case the same.
func forEachAcquirePath(t *testing.T, f func(t *testing.T, force int)) {
	for _, p := range []struct {
		name  string
		force int
	}{
		{"hinted", 0},
		{"full", driver.PathFull + 1},
		{"update-first", driver.PathUpdate + 1},
		{"read-first", driver.PathReadFirst + 1},
	} {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			contend(t)
			f(t, p.force)
		})
	}
}

// contended bounds how many of the 20-client contention tests run at once.
// go test runs GOMAXPROCS parallel tests at a time: on an 8-core machine
// eight of them (160 connections) with the other packages' tests would pass
// PostgreSQL's default max_connections of 100 (MariaDB's 151 went first:
// "Error 1040: Too many connections", seen with GOMAXPROCS=8).
var contended = make(chan struct{}, 2)

func contend(t *testing.T) {
	contended <- struct{}{}
	t.Cleanup(func() { <-contended })
}
