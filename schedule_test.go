package fence

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestScheduleRetention: with WithRetention, Schedule prunes the lease's old
// finished runs after each slot instead of keeping one row per slot forever.
func TestScheduleRetention(t *testing.T) {
	s := migratedSQLite(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var slots atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- Schedule(ctx, s, "retained", "@every 1s", func(context.Context) error {
			if slots.Add(1) >= 3 {
				cancel()
			}
			return nil
		}, WithTTL(3*time.Second), WithRetention(time.Millisecond))
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Schedule: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Schedule ran fewer than 3 slots in a minute")
	}
	runs, err := s.Runs(context.Background(), RunFilter{Lease: "retained"})
	if err != nil {
		t.Fatal(err)
	}
	// Each slot prunes the runs before it (finished ≥ 1 s earlier); only the
	// last slot's run, and perhaps the one before, can remain.
	if len(runs) > 2 {
		t.Errorf("%d runs kept after %d slots with a 1ms retention", len(runs), slots.Load())
	}
	if err := Schedule(context.Background(), s, "retained", "@every 1s", nil, WithRetention(time.Microsecond)); !errors.Is(err, ErrInvalid) {
		t.Errorf("WithRetention(1µs): %v, want ErrInvalid", err)
	}
}
