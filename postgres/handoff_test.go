package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fence/internal/testdb"
)

// A second driver on the same tables over its own pool, as another process.
func peer(t *testing.T, d *Driver) *Driver {
	t.Helper()
	p, err := New(openDB(t), d.prefix)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func woken(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func TestWatchReleaseWakesOnReleaseAndRevoke(t *testing.T) {
	d := newDriver(t)
	w := peer(t, d)
	ctx := context.Background()

	tok := acquire(t, d, "job", time.Hour)
	wake, stop := w.WatchRelease(ctx, "job")
	defer stop()
	other, stopOther := w.WatchRelease(ctx, "other")
	defer stopOther()
	if woken(wake, 100*time.Millisecond) {
		t.Fatal("woken before any release")
	}
	start := time.Now()
	if ok, err := d.LeaseRelease(ctx, tok); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !woken(wake, 5*time.Second) {
		t.Fatal("release did not wake the watcher")
	}
	t.Logf("release -> wake %v", time.Since(start))
	if woken(other, 100*time.Millisecond) {
		t.Fatal("a release of job woke the watcher of other")
	}

	acquire(t, d, "job", time.Hour)
	if _, ok, err := d.LeaseRevoke(ctx, "job"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !woken(wake, 5*time.Second) {
		t.Fatal("revoke did not wake the watcher")
	}
}

// Without a waiter present, a release must not NOTIFY: a NOTIFY serialises
// the commits of the whole database.
func TestReleaseDoesNotNotifyWithoutWaiter(t *testing.T) {
	d := newDriver(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(testdb.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	lc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(ctx)
	if _, err := lc.Exec(ctx, "LISTEN "+pgx.Identifier{d.prefix + "release"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	tok := acquire(t, d, "job", time.Hour)
	if ok, err := d.LeaseRelease(ctx, tok); err != nil || !ok {
		t.Fatal(ok, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if n, err := lc.WaitForNotification(wctx); err == nil {
		t.Fatalf("release notified %q with nobody waiting", n.Payload)
	}
}

// The hub goes away after its linger and comes back for the next waiter.
func TestWatchReleaseAfterStop(t *testing.T) {
	d := newDriver(t)
	w := peer(t, d)
	ctx := context.Background()
	_, stop := w.WatchRelease(ctx, "job")
	stop()
	stop() // idempotent
	w.h.mu.Lock()
	w.h.stopLocked()
	w.h.mu.Unlock()
	tok := acquire(t, d, "job", time.Hour)
	wake, stop := w.WatchRelease(ctx, "job")
	defer stop()
	if ok, err := d.LeaseRelease(ctx, tok); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !woken(wake, 5*time.Second) {
		t.Fatal("release did not wake the watcher after a restart of the hub")
	}
}

// A waiter does not wait past its own deadline for the hub while another
// caller's round trips hold it (here: the test holds it): WatchRelease
// gives up on the watch, silently, when ctx ends. Before, it waited on a
// plain mutex, up to the other caller's 10 s connect or 5 s unlock on a
// server that stopped answering.
func TestWatchReleaseWaitsForTheHubOnlyWithinCtx(t *testing.T) {
	d := newDriver(t)
	h := d.hub()
	h.mu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, stop := d.WatchRelease(ctx, "job")
		stop()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("WatchRelease waited for the hub 30 s past its 200 ms deadline")
	}
	h.mu.Unlock()
	if len(h.names) != 0 {
		t.Errorf("a watch that gave up left %d names registered", len(h.names))
	}
}
