package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// A takeover that waited for the write lock while the lease lapsed must not
// record a term that starts before the lapsed term ended. lease_take.sql
// binds its term start (the Go clock read before the statement), so if the
// statement decided "lapsed" by the database clock at its own later instant,
// the row said the new owner acquired the lease while the old one was still
// valid: CI's TestTortureSQLite reported exactly that (inv1, fence acquired
// at database time …383 while the renewed term was valid until …401). The
// oracle is SQLite itself: its write lock holds the statement back.
func TestTakeWaitingForTheLockStartsNoEarlierThanTheLapse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	file := filepath.Join(t.TempDir(), "take.db")
	d, err := OpenDriver(file, "fence_")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const ttl = 1500
	held, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "t", Owner: "old", Holder: "old", TTLMs: ttl})
	if err != nil || !held.Acquired {
		t.Fatalf("acquire: %+v %v", held, err)
	}
	// Another connection holds the write lock across the lapse.
	blockerDB, err := Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer blockerDB.Close()
	blocker, err := blockerDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	if _, err := blocker.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	type took struct {
		r    driver.AcquireResult
		done bool
		err  error
	}
	res := make(chan took, 1)
	start := time.Now().UnixMilli()
	if start >= held.LeasedUntilMs {
		t.Skipf("the machine took %d ms to get here; the term (%d ms) lapsed before the take began", start-held.NowMs, ttl)
	}
	go func() {
		r, done, err := d.take(ctx, driver.AcquireParams{Name: "t", Owner: "new", Holder: "new", TTLMs: ttl}, held.Fence)
		res <- took{r, done, err}
	}()
	// The take is queued on the lock; let the term lapse under it.
	for now := time.Now().UnixMilli(); now <= held.LeasedUntilMs+50; now = time.Now().UnixMilli() {
		time.Sleep(time.Duration(held.LeasedUntilMs+51-now) * time.Millisecond)
	}
	if _, err := blocker.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	var acquiredAt, until int64
	var owner string
	if err := d.DB().QueryRowContext(ctx, "SELECT owner_token, acquired_at_ms, leased_until_ms FROM fence_leases WHERE lease_name = 't'").Scan(&owner, &acquiredAt, &until); err != nil {
		t.Fatal(err)
	}
	if got.done {
		if owner != "new" {
			t.Fatalf("take reported done, the row's owner is %q", owner)
		}
		if acquiredAt < held.LeasedUntilMs {
			t.Fatalf("the take recorded its term as starting at %d, %d ms before the old term ended (%d): the row says two owners held the lease at once",
				acquiredAt, held.LeasedUntilMs-acquiredAt, held.LeasedUntilMs)
		}
	} else if owner != "old" {
		t.Fatalf("take reported nothing done, the row's owner is %q", owner)
	}
	// Either way an acquisition now succeeds, with a term after the lapse.
	if !got.done {
		r, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "t", Owner: "new", Holder: "new", TTLMs: ttl})
		if err != nil || !r.Acquired {
			t.Fatalf("acquire after the lapse: %+v %v", r, err)
		}
		if r.NowMs < held.LeasedUntilMs || r.LeasedUntilMs != r.NowMs+ttl {
			t.Fatalf("acquired at %d until %d, old term until %d", r.NowMs, r.LeasedUntilMs, held.LeasedUntilMs)
		}
	}
}
