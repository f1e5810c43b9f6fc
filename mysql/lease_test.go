package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/testdb"
)

func TestNewRejectsBadPrefix(t *testing.T) {
	for _, p := range []string{"1x", "a-b", "a;drop", "x`", strings.Repeat("a", 42)} {
		if _, err := New(nil, p); err == nil {
			t.Errorf("New(%q) accepted a bad prefix", p)
		}
	}
	d, err := New(nil, "ok_"+strings.Repeat("a", 38))
	if err != nil {
		t.Fatal(err)
	}
	for name, q := range d.q {
		if strings.Contains(strings.NewReplacer("{{tokens}}", "", "{{names}}", "").Replace(q), "{{") {
			t.Errorf("query %s has an unexpanded macro: %s", name, q)
		}
		if strings.Contains(q, "--") {
			t.Errorf("query %s still has a comment: %s", name, q)
		}
	}
}

// The database clock must be Unix milliseconds whatever the session's time
// zone, and the execution-time clock must move during a statement while the
// statement-start clock stays put.
func TestNowIsUnixMillisInEveryTimeZone(t *testing.T) {
	db := openDB(t, viaPlain)
	d, err := New(db, testdb.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for _, tz := range []string{"+00:00", "-05:00", "+09:30", "SYSTEM"} {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecContext(ctx, "SET time_zone = ?", tz); err != nil {
			t.Fatal(err)
		}
		var now, execNow, unix int64
		before := time.Now().UnixMilli()
		q := "SELECT " + nowMs + ", " + execNowMs + ", CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
		if err := c.QueryRowContext(ctx, q).Scan(&now, &execNow, &unix); err != nil {
			t.Fatal(err)
		}
		after := time.Now().UnixMilli()
		// The server runs on this machine, so its clock is ours (give or
		// take a second for safety); UNIX_TIMESTAMP() is the server's own
		// conversion to compare with exactly.
		if now < before-1000 || now > after+1000 {
			t.Errorf("tz %s: database now %d is not within [%d, %d]", tz, now, before, after)
		}
		if now != unix {
			t.Errorf("tz %s: now %d != UNIX_TIMESTAMP %d", tz, now, unix)
		}
		if execNow < now || execNow > now+500 {
			t.Errorf("tz %s: exec now %d far from now %d in a fast statement", tz, execNow, now)
		}
		q = "SELECT " + nowMs + ", SLEEP(0.2), " + execNowMs + ", " + nowMs
		var slept, now2 int64
		if err := c.QueryRowContext(ctx, q).Scan(&now, &slept, &execNow, &now2); err != nil {
			t.Fatal(err)
		}
		if now2 != now || execNow < now+200 || execNow > now+1000 {
			t.Errorf("tz %s: after SLEEP(0.2): now %d, later now %d, exec now %d", tz, now, now2, execNow)
		}
		c.Close()
	}
	got, err := d.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := time.Since(time.UnixMilli(got)); diff < -time.Second || diff > time.Second {
		t.Errorf("Now() is %v off the local clock", diff)
	}
}

// Every acquire path (the upsert with MariaDB's RETURNING or MySQL 8's
// insert id, which MariaDB runs as well; each behind the read-first path of
// a lease known to be held, or not; and as the hints choose) through every
// state; a new fence is max(old + 1,
// the database clock in microseconds), so it is checked against the clock
// read before the call and against the fence before it.
func TestAcquireLifecycle(t *testing.T) {
	for _, path := range []struct {
		name  string
		mode  int32
		force int
	}{
		{"returning", returningYes, pathUpsert + 1}, {"insert-id", returningNo, pathUpsert + 1},
		{"read-first/returning", returningYes, pathReadFirst + 1}, {"read-first/insert-id", returningNo, pathReadFirst + 1},
		{"update-first/returning", returningYes, pathUpdate + 1}, {"update-first/insert-id", returningNo, pathUpdate + 1},
		{"hinted", returningUnknown, 0},
	} {
		t.Run(path.name, func(t *testing.T) {
			forEachHandle(t, func(t *testing.T, d *Driver) {
				if path.mode == returningYes {
					if ok, err := d.hasReturning(ctxT(t)); err != nil || !ok {
						t.Skipf("the server has no INSERT ... RETURNING (%v)", err)
					}
				}
				d.returning.Store(path.mode)
				d.hints.Force = path.force
				acquireLifecycle(t, d)
			})
		})
	}
}

func acquireLifecycle(t *testing.T, d *Driver) {
	ctx := ctxT(t)
	acq := func(owner string, ttl int64) driver.AcquireResult {
		t.Helper()
		r, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: owner, Holder: "host-" + owner, TTLMs: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	newFence := func(what string, f, prev, nowMs int64) {
		t.Helper()
		if f <= prev || f < nowMs*1000 {
			t.Fatalf("%s: fence %d, want above %d and at least the clock %d µs", what, f, prev, nowMs*1000)
		}
	}
	// absent -> the clock floor
	before := now(t, d)
	r := acq("A", 60_000)
	if !r.Acquired {
		t.Fatalf("absent: %+v", r)
	}
	newFence("absent", r.Fence, 0, before)
	a := driver.TokenParams{Name: "job", Owner: "A", Fence: r.Fence}
	// held -> not acquired, holder reported, nothing changed
	r = acq("B", 60_000)
	if r.Acquired || r.Holder == nil || r.Holder.Owner != "A" || r.Holder.Holder != "host-A" || r.Holder.Fence != a.Fence || r.Holder.LeasedUntilMs <= r.Holder.NowMs {
		t.Fatalf("held: %+v holder %+v", r, r.Holder)
	}
	if r.Holder.LeasedUntilMs-r.Holder.NowMs > 60_000 || r.Holder.LeasedUntilMs-r.Holder.NowMs < 59_000 {
		t.Errorf("held: remaining %d ms, want about 60000", r.Holder.LeasedUntilMs-r.Holder.NowMs)
	}
	// the same owner asking again is refused too: acquisition is not renewal
	if r = acq("A", 60_000); r.Acquired {
		t.Fatalf("re-acquire by the holder succeeded: %+v", r)
	}
	if ok, _ := d.LeaseIsHeld(ctx, a); !ok {
		t.Fatal("a refused acquire disturbed the holder")
	}
	// released -> above A's
	if ok, err := d.LeaseRelease(ctx, a); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	l, _, _ := d.LeaseGet(ctx, "job")
	if l.State != driver.StateReleased || l.LeasedUntilMs != 0 || l.Owner != "A" || l.Fence != a.Fence {
		t.Fatalf("after release: %+v", l)
	}
	before = now(t, d)
	if r = acq("B", 100); !r.Acquired {
		t.Fatalf("after release: %+v", r)
	}
	newFence("after release", r.Fence, a.Fence, before)
	b := r.Fence
	// expired by the database clock -> above B's
	time.Sleep(200 * time.Millisecond)
	before = now(t, d)
	if r = acq("C", 60_000); !r.Acquired {
		t.Fatalf("after expiry: %+v", r)
	}
	newFence("after expiry", r.Fence, b, before)
	c := r.Fence
	l, _, _ = d.LeaseGet(ctx, "job")
	if l.Owner != "C" || l.Holder != "host-C" || l.Fence != c || l.State != driver.StateHeld || l.AcquiredAtMs != l.UpdatedAtMs || l.LeasedUntilMs != l.AcquiredAtMs+60_000 {
		t.Fatalf("after takeover: %+v", l)
	}
	// revoked -> the revoke takes a fence of its own, the next acquisition
	// one above it
	before = now(t, d)
	f, ok, err := d.LeaseRevoke(ctx, "job")
	if err != nil || !ok {
		t.Fatalf("revoke: %d %v %v", f, ok, err)
	}
	newFence("revoke", f, c, before)
	l, _, _ = d.LeaseGet(ctx, "job")
	if l.State != driver.StateRevoked || l.Owner != "" || l.Holder != "" || l.Fence != f || l.LeasedUntilMs != 0 {
		t.Fatalf("after revoke: %+v", l)
	}
	if ok, _ := d.LeaseIsHeld(ctx, driver.TokenParams{Name: "job", Owner: "C", Fence: c}); ok {
		t.Fatal("revoked token still held")
	}
	before = now(t, d)
	if r = acq("D", 60_000); !r.Acquired {
		t.Fatalf("after revoke: %+v", r)
	}
	newFence("after revoke", r.Fence, f, before)
	// A fence already above the clock (a raise ahead of it, or a burst)
	// continues at +1: the floor never lowers a fence.
	ahead := (before + 3_600_000) * 1000
	if _, err := d.db.ExecContext(ctx, "UPDATE "+d.prefix+"leases SET fence_token = ?, leased_until_ms = 0 WHERE lease_name = 'job'", ahead); err != nil {
		t.Fatal(err)
	}
	if r = acq("E", 60_000); !r.Acquired || r.Fence != ahead+1 {
		t.Fatalf("fence ahead of the clock: %+v, want fence %d", r, ahead+1)
	}
	if f, ok, err := d.LeaseRevoke(ctx, "job"); err != nil || !ok || f != ahead+2 {
		t.Fatalf("revoke of a fence ahead of the clock: %d %v %v, want %d", f, ok, err, ahead+2)
	}
	if _, ok, err := d.LeaseRevoke(ctx, "nope"); ok || err != nil {
		t.Fatalf("revoke of a missing lease: %v %v", ok, err)
	}
}

func now(t testing.TB, d *Driver) int64 {
	t.Helper()
	n, err := d.Now(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Lease names compare byte-wise: case, trailing spaces and Unicode
// normalisation all make different leases.
func TestLeaseNamesAreBytes(t *testing.T) {
	forEachHandle(t, func(t *testing.T, d *Driver) {
		names := []string{"job", "Job", "JOB", "job ", " job", "job  ", "caf\u00e9", "cafe\u0301", "\U0001F600", strings.Repeat("x", 191)}
		for _, n := range names {
			tok := mustAcquire(t, d, n, "o", 60_000)
			if l, ok, err := d.LeaseGet(ctxT(t), n); err != nil || !ok || l.Fence != tok.Fence {
				t.Errorf("%q: reads back as %+v %v %v, want fence %d (collided with another name)", n, l, ok, err, tok.Fence)
			}
		}
		ls, _, err := d.LeaseList(ctxT(t), driver.LeaseFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) != len(names) {
			t.Fatalf("%d rows for %d names", len(ls), len(names))
		}
		for i := 1; i < len(ls); i++ {
			if ls[i-1].Name >= ls[i].Name {
				t.Errorf("list not in byte order: %q before %q", ls[i-1].Name, ls[i].Name)
			}
		}
		for _, n := range names {
			l, ok, err := d.LeaseGet(ctxT(t), n)
			if err != nil || !ok || l.Name != n {
				t.Errorf("get %q: %q %v %v", n, l.Name, ok, err)
			}
		}
	})
}

func TestRenewReleaseIsHeldConditions(t *testing.T) {
	forEachHandle(t, func(t *testing.T, d *Driver) {
		ctx := ctxT(t)
		a := mustAcquire(t, d, "job", "A", 60_000)
		wrong := []driver.TokenParams{
			{Name: "job", Owner: "B", Fence: a.Fence},
			{Name: "job", Owner: "A", Fence: a.Fence + 1},
			{Name: "job", Owner: "A", Fence: a.Fence - 1},
			{Name: "Job", Owner: "A", Fence: a.Fence},
			{Name: "other", Owner: "A", Fence: a.Fence},
			{Name: "job", Owner: "a", Fence: a.Fence},
			{Name: "job", Owner: "A ", Fence: a.Fence},
		}
		for _, w := range wrong {
			if ok, err := d.LeaseIsHeld(ctx, w); err != nil || ok {
				t.Errorf("is-held %+v: %v %v", w, ok, err)
			}
			if r, err := d.LeaseRenew(ctx, w, 1000); err != nil || r.Renewed {
				t.Errorf("renew %+v: %+v %v", w, r, err)
			}
			if ok, err := d.LeaseRelease(ctx, w); err != nil || ok {
				t.Errorf("release %+v: %v %v", w, ok, err)
			}
		}
		if ok, err := d.LeaseIsHeld(ctx, a); err != nil || !ok {
			t.Fatalf("is-held: %v %v", ok, err)
		}
		before, _, _ := d.LeaseGet(ctx, "job")
		r, err := d.LeaseRenew(ctx, a, 30_000)
		if err != nil || !r.Renewed {
			t.Fatalf("renew: %+v %v", r, err)
		}
		after, _, _ := d.LeaseGet(ctx, "job")
		if r.LeasedUntilMs != after.LeasedUntilMs || r.LeasedUntilMs != r.NowMs+30_000 || r.NowMs < before.NowMs || r.NowMs > after.NowMs {
			t.Errorf("renew result %+v, row before %+v after %+v", r, before, after)
		}
		if after.UpdatedAtMs != r.NowMs || after.AcquiredAtMs != before.AcquiredAtMs {
			t.Errorf("renew row %+v", after)
		}
		var count int64
		if err := d.db.QueryRowContext(ctx, "SELECT renew_count FROM "+d.prefix+"leases WHERE lease_name = 'job'").Scan(&count); err != nil || count != 1 {
			t.Errorf("renew_count %d %v", count, err)
		}
		// Renewing again within the same millisecond still changes the row
		// (renew_count), so it counts as renewed without clientFoundRows too.
		for range 3 {
			if r, err := d.LeaseRenew(ctx, a, 30_000); err != nil || !r.Renewed {
				t.Fatalf("quick renew: %+v %v", r, err)
			}
		}
		if ok, err := d.LeaseRelease(ctx, a); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		if ok, _ := d.LeaseIsHeld(ctx, a); ok {
			t.Error("held after release")
		}
		if ok, _ := d.LeaseRelease(ctx, a); ok {
			t.Error("released twice")
		}
		if r, _ := d.LeaseRenew(ctx, a, 30_000); r.Renewed {
			t.Error("renewed after release")
		}
	})
}

// Expiry is decided by the database clock alone. The test waits for the
// database clock to pass each lease's expiry instead of sleeping a guess,
// and asserts that a short lease is held only where the database clock
// says it must be (a loaded machine can take longer than 50 ms between the
// acquire and the next statement).
func TestExpiryByDatabaseClock(t *testing.T) {
	forEachHandle(t, func(t *testing.T, d *Driver) {
		ctx := ctxT(t)
		for _, ttl := range []int64{50, 100, 200} {
			name := fmt.Sprint("ttl", ttl)
			a := mustAcquire(t, d, name, "A", ttl)
			l, _, err := d.LeaseGet(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if l.LeasedUntilMs > l.NowMs+ttl {
				t.Errorf("ttl %d: leased until %d, more than the TTL after the database's now %d", ttl, l.LeasedUntilMs, l.NowMs)
			}
			if ok, err := d.LeaseIsHeld(ctx, a); err != nil {
				t.Fatal(err)
			} else if !ok {
				if now := dbNow(t, d); now < l.LeasedUntilMs {
					t.Fatalf("ttl %d: not held at %d, before its expiry %d", ttl, now, l.LeasedUntilMs)
				}
			}
			waitDBPast(t, d, l.LeasedUntilMs)
			if ok, _ := d.LeaseIsHeld(ctx, a); ok {
				t.Errorf("ttl %d: still held after expiry", ttl)
			}
			if r, _ := d.LeaseRenew(ctx, a, 60_000); r.Renewed {
				t.Errorf("ttl %d: renewed after expiry", ttl)
			}
			if ok, _ := d.LeaseRelease(ctx, a); ok {
				t.Errorf("ttl %d: released after expiry", ttl)
			}
			l, _, _ = d.LeaseGet(ctx, name)
			if l.State != driver.StateHeld || l.LeasedUntilMs > l.NowMs {
				t.Errorf("ttl %d: expired row %+v", ttl, l)
			}
			if b := mustAcquire(t, d, name, "B", 60_000); b.Fence <= a.Fence {
				t.Errorf("ttl %d: takeover fence %d", ttl, b.Fence)
			}
		}
		// A renewal extends the lease from the database's now, past the
		// expiry the acquisition set.
		a := mustAcquire(t, d, "kept", "A", 60_000)
		l, _, err := d.LeaseGet(ctx, "kept")
		if err != nil {
			t.Fatal(err)
		}
		waitDBPast(t, d, l.NowMs+5)
		r, err := d.LeaseRenew(ctx, a, 60_000)
		if err != nil || !r.Renewed || r.LeasedUntilMs <= l.LeasedUntilMs {
			t.Fatalf("renew: %+v %v, first expiry %d", r, err, l.LeasedUntilMs)
		}
		if ok, _ := d.LeaseIsHeld(ctx, a); !ok {
			t.Error("renewed lease lapsed")
		}
	})
}

func dbNow(t testing.TB, d *Driver) int64 {
	t.Helper()
	now, err := d.Now(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// expireNow ends name's lease at the database's now, as its TTL would:
// tests use a long TTL and this, instead of a short TTL that a loaded
// machine can outlast before the lease was used.
func expireNow(t testing.TB, d *Driver, name string) {
	t.Helper()
	if _, err := d.db.ExecContext(ctxT(t), "UPDATE "+d.prefix+"leases SET leased_until_ms = ? WHERE lease_name = ?", dbNow(t, d), name); err != nil {
		t.Fatal(err)
	}
}

// waitDBPast waits until the database clock reads ms or later: a lease
// leased until ms has lapsed then.
func waitDBPast(t testing.TB, d *Driver, ms int64) {
	t.Helper()
	for {
		now := dbNow(t, d)
		if now >= ms {
			return
		}
		time.Sleep(time.Duration(ms-now+1) * time.Millisecond)
	}
}

// A renew that waited for the row lock behind a fenced transaction judges
// expiry when it gets the lock: it must not bring back a lease that lapsed
// while it waited (it would, judged by the statement's start time).
func TestRenewAfterLockWaitDoesNotResurrect(t *testing.T) {
	for _, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			d := newDriver(t, viaOpen)
			ctx := ctxT(t)
			c := sessionConn(t, d.db, iso, 10)
			// The lock must be taken before the short lease lapses: on a
			// loaded machine that can take longer than a second, so a
			// lease that lapsed first is tried again with twice the TTL.
			var (
				a    driver.TokenParams
				tx   *sql.Tx
				name string
			)
			for ttl := int64(1000); ; ttl *= 2 {
				name = fmt.Sprint("job", ttl)
				a = mustAcquire(t, d, name, "A", ttl)
				var err error
				if tx, err = c.BeginTx(ctx, nil); err != nil {
					t.Fatal(err)
				}
				ok, err := d.LockTx(ctx, tx, a)
				if err != nil {
					t.Fatalf("lock: %v", err)
				}
				if ok {
					break
				}
				tx.Rollback()
				if ttl >= 64_000 {
					t.Fatalf("lock: the lease lapsed before the lock at every TTL up to %d ms", ttl)
				}
			}
			done := make(chan driver.RenewResult, 1)
			go func() {
				r, err := d.LeaseRenew(ctx, a, 60_000)
				if err != nil {
					t.Error(err)
				}
				done <- r
			}()
			waitRunning(t, d.db, "renew_count = renew_count + 1", d.prefix)
			select {
			case r := <-done:
				t.Fatalf("renew did not wait for the share lock: %+v", r)
			default:
			}
			// Let the lease lapse, by the database clock, while the renew waits.
			l, _, _ := d.LeaseGet(ctx, name)
			waitDBPast(t, d, l.LeasedUntilMs+1)
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if r := <-done; r.Renewed {
				t.Fatalf("renew after the lease lapsed during its lock wait succeeded: %+v", r)
			}
			if ok, _ := d.LeaseIsHeld(ctx, a); ok {
				t.Fatal("lapsed lease is valid again")
			}
		})
	}
}

func TestRenewBatch(t *testing.T) {
	forEachHandle(t, func(t *testing.T, d *Driver) {
		ctx := ctxT(t)
		const n = 10_000
		// Insert the leases directly: 10,000 acquires would test the network.
		var b strings.Builder
		for i := range n {
			if b.Len() > 0 {
				b.WriteString(",")
			}
			until := "9999999999999"
			if i%7 == 3 {
				until = "1" // expired
			}
			fmt.Fprintf(&b, "('lease-%05d', 'owner-%05d', %d, 'held', %s, 0, 0, 0)", i, i, 10+i%5, until)
		}
		if _, err := d.db.ExecContext(ctx, "INSERT INTO "+d.prefix+"leases (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, renew_count) VALUES "+b.String()); err != nil {
			t.Fatal(err)
		}
		ts := make([]driver.TokenParams, n)
		want := make([]bool, n)
		for i := range ts {
			ts[i] = driver.TokenParams{Name: fmt.Sprintf("lease-%05d", i), Owner: fmt.Sprintf("owner-%05d", i), Fence: int64(10 + i%5)}
			want[i] = i%7 != 3
			switch i % 11 {
			case 5:
				ts[i].Fence++ // stale fence
				want[i] = false
			case 6:
				ts[i].Owner = "intruder"
				want[i] = false
			case 7:
				ts[i].Name = fmt.Sprintf("missing-%05d", i)
				want[i] = false
			}
		}
		// Input order is not key order, and a token may repeat.
		for i := 0; i < n; i += 97 {
			j := n - 1 - i
			ts[i], ts[j] = ts[j], ts[i]
			want[i], want[j] = want[j], want[i]
		}
		ts = append(ts, ts[0])
		want = append(want, want[0])

		start := time.Now()
		rs, err := d.LeaseRenewBatch(ctx, ts, 45_000)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("renewed %d tokens in %v", len(ts), time.Since(start))
		if len(rs) != len(ts) {
			t.Fatalf("%d results for %d tokens", len(rs), len(ts))
		}
		renewed := 0
		for i, r := range rs {
			if r.Renewed != want[i] {
				t.Fatalf("token %d %+v: renewed %v, want %v", i, ts[i], r.Renewed, want[i])
			}
			if r.Renewed {
				renewed++
				// NowMs is when the outcome was read, after the UPDATEs.
				if r.LeasedUntilMs <= r.NowMs || r.LeasedUntilMs > r.NowMs+45_000 {
					t.Fatalf("token %d: %+v", i, r)
				}
			}
		}
		var rowsRenewed int
		if err := d.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+d.prefix+"leases WHERE renew_count = 1").Scan(&rowsRenewed); err != nil {
			t.Fatal(err)
		}
		var distinct int
		seen := map[string]bool{}
		for i, tk := range ts {
			if want[i] && !seen[tk.Name] {
				seen[tk.Name] = true
				distinct++
			}
		}
		if rowsRenewed != distinct {
			t.Errorf("%d rows renewed in the table, %d distinct valid tokens", rowsRenewed, distinct)
		}
		if rs, err := d.LeaseRenewBatch(ctx, nil, 1000); err != nil || len(rs) != 0 {
			t.Errorf("empty batch: %v %v", rs, err)
		}
	})
}

// Twenty workers contend for one name, fifty rounds each, with the
// acquire's first statement as the hints choose it (path0) and forced to
// each of the three: every fence has exactly one winner, a second owner never holds the
// lease while the first does, and nobody gets an error.
func TestContendedAcquire(t *testing.T) {
	for _, c := range []struct {
		mode  string
		force int
	}{
		{"release", 0}, {"expire", 0},
		{"release", pathUpsert + 1}, {"expire", pathUpsert + 1},
		{"release", pathUpdate + 1}, {"expire", pathUpdate + 1},
		{"release", pathReadFirst + 1}, {"expire", pathReadFirst + 1},
	} {
		mode := c.mode
		t.Run(fmt.Sprintf("%s/path%d", mode, c.force), func(t *testing.T) {
			t.Parallel()
			contend(t)
			d := newDriver(t, viaOpen)
			d.hints.Force = c.force
			d.db.SetMaxOpenConns(40)
			ctx := ctxT(t)
			const workers, rounds = 20, 50
			var (
				mu      sync.Mutex
				winners = map[int64]string{}
				holding string
			)
			deadlocksBefore := deadlocks.Load()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for r := range rounds {
						owner := fmt.Sprintf("w%02d-r%02d", w, r)
						ttl := int64(60_000)
						if mode == "expire" {
							ttl = 20
						}
						res, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "hot", Owner: owner, TTLMs: ttl})
						if err != nil {
							t.Errorf("%s: %v", owner, err)
							return
						}
						if !res.Acquired {
							continue
						}
						mu.Lock()
						if prev, dup := winners[res.Fence]; dup {
							t.Errorf("fence %d won by %s and %s", res.Fence, prev, owner)
						}
						winners[res.Fence] = owner
						if mode == "release" {
							if holding != "" {
								t.Errorf("%s acquired fence %d while %s held the lease", owner, res.Fence, holding)
							}
							holding = owner
						}
						mu.Unlock()
						if mode == "release" {
							tok := driver.TokenParams{Name: "hot", Owner: owner, Fence: res.Fence}
							mu.Lock()
							holding = ""
							mu.Unlock()
							if ok, err := d.LeaseRelease(ctx, tok); err != nil || !ok {
								t.Errorf("%s: release %v %v", owner, ok, err)
							}
						}
					}
				})
			}
			wg.Wait()
			l, _, _ := d.LeaseGet(ctx, "hot")
			// Fences are not contiguous (each is at least the clock in µs),
			// so "none lost" is: the row ends at the last fence handed out.
			if top := slices.Max(slices.Collect(maps.Keys(winners))); l.Fence != top {
				t.Errorf("%d winners, the last fence handed out %d, but the row has fence %d", len(winners), top, l.Fence)
			}
			t.Logf("%s: %d acquisitions of %d attempts; %d deadlocks retried", mode, len(winners), workers*rounds, deadlocks.Load()-deadlocksBefore)
		})
	}
}

// contended bounds how many of the 20-worker contention tests run at once.
// go test runs GOMAXPROCS parallel tests at a time: with GOMAXPROCS=8 all
// eight paths at once (160 connections) passed MariaDB's default
// max_connections of 151 ("Error 1040: Too many connections").
var contended = make(chan struct{}, 2)

func contend(t *testing.T) {
	contended <- struct{}{}
	t.Cleanup(func() { <-contended })
}

// Contention across many names exercises gap locks between neighbouring
// keys, where concurrent inserts and upserts can deadlock.
func TestContendedAcquireManyNames(t *testing.T) {
	d := newDriver(t, viaOpen)
	d.db.SetMaxOpenConns(40)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Go(func() {
			for r := range 50 {
				name := fmt.Sprintf("n%03d", (w*7+r*13)%40)
				res, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: name, Owner: fmt.Sprint(w, "-", r), TTLMs: 5})
				if err != nil {
					t.Errorf("acquire %s: %v", name, err)
					return
				}
				if res.Acquired && r%3 == 0 {
					if _, _, err := d.LeaseRevoke(ctx, name); err != nil {
						t.Errorf("revoke: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestLockTx(t *testing.T) {
	forEachHandle(t, func(t *testing.T, d *Driver) {
		ctx := ctxT(t)
		a := mustAcquire(t, d, "job", "A", 60_000)
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if ok, err := d.LockTx(ctx, tx, a); err != nil || !ok {
			t.Fatalf("valid token: %v %v", ok, err)
		}
		for _, w := range []driver.TokenParams{{Name: "job", Owner: "B", Fence: a.Fence}, {Name: "job", Owner: "A", Fence: a.Fence + 1}, {Name: "none", Owner: "A", Fence: 1}} {
			if ok, err := d.LockTx(ctx, tx, w); err != nil || ok {
				t.Errorf("%+v: %v %v", w, ok, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}

// SchemaVersion is 0 before Migrate; Migrate is idempotent and safe to run
// concurrently; DropTables removes everything.
func TestMigrate(t *testing.T) {
	db := openDB(t, viaOpen)
	ctx := ctxT(t)
	prefix := testdb.Prefix()
	d, err := New(db, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.DropTables(context.Background()) })
	if v, err := d.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("before migrate: %d %v", v, err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			// Each on its own pool, as separate processes would be.
			d2, err := New(openDB(t, viaOpen), prefix)
			if err != nil {
				t.Error(err)
				return
			}
			if v, err := d2.Migrate(ctx); err != nil || v != latestVersion(t) {
				t.Errorf("concurrent migrate: %d %v", v, err)
			}
		})
	}
	wg.Wait()
	for range 2 {
		if v, err := d.Migrate(ctx); err != nil || v != latestVersion(t) {
			t.Fatalf("migrate again: %d %v", v, err)
		}
	}
	var rows int
	// One row per migration file: the versions have a gap (0005 is unused).
	files, _ := fs.Glob(Migrations, "migrations/*.sql")
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+prefix+"schema").Scan(&rows); err != nil || rows != len(files) {
		t.Fatalf("schema rows %d %v", rows, err)
	}
	if v, err := d.SchemaVersion(ctx); err != nil || v != latestVersion(t) {
		t.Fatalf("schema version: %d %v", v, err)
	}
	// The migration lock was released: another session can take it at once.
	var got sql.NullInt64
	if err := db.QueryRowContext(ctx, d.q["migrate_lock"], prefix, 0).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("migration lock still held: %v %v", got, err)
	}
	db.ExecContext(ctx, d.q["migrate_unlock"], prefix)
	// A table created by an interrupted migration is completed on re-run.
	if _, err := db.ExecContext(ctx, "DROP TABLE "+prefix+"runs"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM "+prefix+"schema"); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Migrate(ctx); err != nil || v != latestVersion(t) {
		t.Fatalf("re-run after a partial migration: %d %v", v, err)
	}
	if _, err := d.RunList(ctx, driver.RunFilter{}); err != nil {
		t.Fatalf("runs table missing after re-run: %v", err)
	}
	// Version 3's ALTER of leases found its columns there (1060, skipped);
	// its ALTER of the re-created runs added them.
	for _, q := range []string{"SELECT holder, guard_seq FROM " + prefix + "leases", "SELECT holder FROM " + prefix + "runs"} {
		if rows, err := db.QueryContext(ctx, q); err != nil {
			t.Fatalf("%s after re-run: %v", q, err)
		} else {
			rows.Close()
		}
	}
	// The tables are what SCHEMA.md asks for.
	var engine, coll string
	if err := db.QueryRowContext(ctx, "SELECT ENGINE, TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", prefix+"leases").Scan(&engine, &coll); err != nil {
		t.Fatal(err)
	}
	if engine != "InnoDB" || !strings.HasPrefix(coll, "utf8mb4") {
		t.Errorf("leases is %s %s", engine, coll)
	}
	if err := d.DropTables(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := d.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("after drop: %d %v", v, err)
	}
	if err := d.DropTables(ctx); err != nil {
		t.Fatalf("drop twice: %v", err)
	}
}

// A trigger on fence's tables (an audit log, the conformance suite's history
// recorder) makes MariaDB report insert id 0 for every statement on the
// table, even for a trigger that only sets a variable. The values handed
// back through LAST_INSERT_ID must survive that.
func TestTriggersDoNotHideReturnedValues(t *testing.T) {
	forEachHandle(t, func(t *testing.T, d *Driver) {
		ctx := ctxT(t)
		for _, q := range []string{
			"CREATE TRIGGER " + d.prefix + "li AFTER INSERT ON " + d.prefix + "leases FOR EACH ROW SET @fence_test = 1",
			"CREATE TRIGGER " + d.prefix + "lu AFTER UPDATE ON " + d.prefix + "leases FOR EACH ROW SET @fence_test = 2",
			"CREATE TRIGGER " + d.prefix + "ri AFTER INSERT ON " + d.prefix + "runs FOR EACH ROW SET @fence_test = 3",
		} {
			if _, err := d.db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		before := now(t, d)
		a := mustAcquire(t, d, "job", "A", 60_000)
		if a.Fence < before*1000 {
			t.Fatalf("insert: fence %d below the clock %d µs", a.Fence, before*1000)
		}
		r, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: "B", TTLMs: 60_000})
		if err != nil || r.Acquired || r.Holder == nil || r.Holder.Owner != "A" {
			t.Fatalf("held: %+v %v", r, err)
		}
		rr, err := d.LeaseRenew(ctx, a, 100)
		if err != nil || !rr.Renewed || rr.LeasedUntilMs != rr.NowMs+100 || rr.NowMs <= 0 {
			t.Fatalf("renew: %+v %v", rr, err)
		}
		time.Sleep(150 * time.Millisecond)
		b := mustAcquire(t, d, "job", "B", 60_000)
		if b.Fence <= a.Fence {
			t.Fatalf("takeover: fence %d after %d", b.Fence, a.Fence)
		}
		if f, ok, err := d.LeaseRevoke(ctx, "job"); err != nil || !ok || f <= b.Fence {
			t.Fatalf("revoke: %d %v %v after %d", f, ok, err, b.Fence)
		}
		c := mustAcquire(t, d, "job", "C", 60_000)
		id1, ok, err := d.RunStart(ctx, driver.StartRunParams{Token: c})
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		id2, _, _ := d.RunStart(ctx, driver.StartRunParams{Token: c})
		if id1 <= 0 || id2 != id1+1 {
			t.Fatalf("run ids %d %d", id1, id2)
		}
		if run, ok, _ := d.RunGet(ctx, id2); !ok || run.Fence != c.Fence {
			t.Fatalf("run %d: %+v", id2, run)
		}
	})
}

// latestVersion is the number of the newest embedded migration.
func latestVersion(t *testing.T) int {
	files, err := fs.Glob(Migrations, "migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	n, err := strconv.Atoi(strings.SplitN(path.Base(files[len(files)-1]), "_", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}
