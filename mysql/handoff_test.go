package mysql

import (
	"testing"
	"time"
)

func woken(ch <-chan struct{}, within time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(within):
		return false
	}
}

// A watch in another process (its own pool) wakes on a release, a revoke
// and an expiry of the watched lease, and not for another lease's.
func TestWatchReleaseWakesOnReleaseRevokeAndExpiry(t *testing.T) {
	d := newDriver(t, viaOpen)
	w, err := New(openDB(t, viaOpen), d.prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	tok := mustAcquire(t, d, "job", "A", 60_000)
	mustAcquire(t, d, "other", "A", 60_000)
	wake, stop := w.WatchRelease(ctx, "job")
	defer stop()
	other, stopOther := w.WatchRelease(ctx, "other")
	defer stopOther()
	if woken(wake, 200*time.Millisecond) {
		t.Fatal("woken before any release")
	}
	if ok, err := d.LeaseRelease(ctx, tok); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !woken(wake, 10*time.Second) {
		t.Fatal("release did not wake the watcher")
	}
	if woken(other, 200*time.Millisecond) {
		t.Fatal("a release of job woke the watcher of other")
	}

	mustAcquire(t, d, "job", "B", 60_000)
	if woken(wake, 200*time.Millisecond) {
		t.Fatal("woken while the lease is held again")
	}
	if _, ok, err := d.LeaseRevoke(ctx, "job"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !woken(wake, 10*time.Second) {
		t.Fatal("revoke did not wake the watcher")
	}

	mustAcquire(t, d, "job", "C", 3000) // long enough for a poll to see it valid
	if !woken(wake, 10*time.Second) {
		t.Fatal("expiry did not wake the watcher")
	}
	stop()
	stopOther()
	w.watches.mu.Lock()
	n := len(w.watches.names)
	w.watches.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d pollers left after every watch stopped", n)
	}
}
