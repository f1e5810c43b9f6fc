package postgres

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// doneRecorder is a context that notes whether database/sql's per-query
// goroutine (Rows.awaitDone) ever asked for its Done channel.
type doneRecorder struct {
	context.Context
	mu   sync.Mutex
	seen bool
}

func (r *doneRecorder) Done() <-chan struct{} {
	pcs := make([]uintptr, 16)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "database/sql.(*Rows).awaitDone") {
			r.mu.Lock()
			r.seen = true
			r.mu.Unlock()
		}
		if !more {
			break
		}
	}
	return r.Context.Done()
}

func (r *doneRecorder) awaited() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

// blockedRenew starts a renew of a lease whose row another transaction holds
// locked, with ctx, through a driver of its own, and returns once that renew
// waits for the lock; unlock commits the other transaction and returns the
// renew's outcome.
func blockedRenew(t *testing.T, ctx context.Context, renew func(ctx context.Context, d *Driver, tok driver.TokenParams) error) (unlock func() error) {
	t.Helper()
	d := newDriver(t)
	tok := acquire(t, d, "job", time.Minute)
	tx, err := d.db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if ok, err := d.LockTx(context.Background(), tx, tok); err != nil || !ok {
		t.Fatalf("LockTx = %v, %v", ok, err)
	}
	solo, pid := soloDriver(t, d)
	done := make(chan error, 1)
	go func() { done <- renew(ctx, solo, tok) }()
	waitLocked(t, d.db, pid)
	return func() error {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return <-done
	}
}

// With a context that can be cancelled, database/sql starts a goroutine per
// query (Rows.awaitDone); the driver's one-row statements run on pgx's own
// connection instead (rawRow) and start none. The control, a query through
// database/sql after the renew, must be seen starting that goroutine, or
// the check could not fail; the renew's would have run by then.
func TestQueryRowCancellableStartsNoGoroutine(t *testing.T) {
	d := newDriver(t)
	tok := acquire(t, d, "job", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	renewCtx := &doneRecorder{Context: ctx}
	if r, err := d.LeaseRenew(renewCtx, tok, 60_000); err != nil || !r.Renewed {
		t.Fatalf("LeaseRenew = %+v, %v", r, err)
	}
	control := &doneRecorder{Context: ctx}
	var n int
	if err := d.db.QueryRowContext(control, "SELECT 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !control.awaited(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the control query never started database/sql's awaitDone goroutine: this test cannot see it")
		}
	}
	if renewCtx.awaited() {
		t.Error("LeaseRenew with a cancellable context went through database/sql's query path (Rows.awaitDone)")
	}
}

// A one-row statement on pgx's own connection still ends when its context
// is cancelled while it waits, with an error that says so, and the pool
// stays usable.
func TestQueryRowCancelledWhileWaiting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var solo *Driver
	unlock := blockedRenew(t, ctx, func(ctx context.Context, d *Driver, tok driver.TokenParams) error {
		solo = d
		_, err := d.LeaseRenew(ctx, tok, 60_000)
		return err
	})
	start := time.Now()
	cancel()
	err := unlock()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("renew cancelled while waiting: %v, want an error wrapping context.Canceled", err)
	}
	t.Logf("ended %v after the cancel: %v", time.Since(start), err)
	var n int
	if err := solo.db.QueryRowContext(context.Background(), "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the pool after the cancelled renew: %d, %v", n, err)
	}
}
