package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// heldCount counts acquire attempts refused with ErrHeld.
type heldCount struct{ n atomic.Int64 }

func (h *heldCount) Observe(ctx context.Context, op fence.Op, lease string) (context.Context, func(fence.Event)) {
	return ctx, func(e fence.Event) {
		if op == fence.OpAcquire && errors.Is(e.Err, fence.ErrHeld) {
			h.n.Add(1)
		}
	}
}

// A release through one handle wakes an AcquireWait of the same process
// on another handle of the same file at once. The waiter's poll is an hour
// and the holder's TTL too, so without the wake-up the waiter would still
// be asleep when the test's deadline ends it.
func TestAcquireWaitWokenByReleaseInProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "handoff.db")
	holder, err := fencedsn.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var held heldCount
	waiter, err := fencedsn.Open(ctx, dsn, fence.WithWaitBackoff(25*time.Millisecond, time.Hour), fence.WithObserver(&held))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()

	for round := range 3 {
		l, err := holder.Acquire(ctx, "h", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		before := held.n.Load()
		type got struct {
			l   fence.Lease
			err error
		}
		done := make(chan got, 1)
		go func() {
			wl, err := waiter.AcquireWait(ctx, "h", time.Minute)
			done <- got{wl, err}
		}()
		// Refused twice: once before the watch began and once after, so the
		// waiter now sleeps (for the holder's hour) until woken.
		for held.n.Load() < before+2 {
			time.Sleep(time.Millisecond)
		}
		if err := holder.Release(ctx, l.Token); err != nil {
			t.Fatal(err)
		}
		g := <-done
		if g.err != nil {
			t.Fatalf("round %d: AcquireWait: %v", round, g.err)
		}
		if g.l.Token.Fence <= l.Token.Fence {
			t.Fatalf("round %d: waiter's fence %d not above the holder's %d", round, g.l.Token.Fence, l.Token.Fence)
		}
		if err := waiter.Release(ctx, g.l.Token); err != nil {
			t.Fatal(err)
		}
	}
}
