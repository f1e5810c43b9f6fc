package bench

import (
	"context"
	"errors"
	"testing"
)

// The operations run with a context that cannot be cancelled, whatever the
// run's context: database/sql starts a goroutine for every query whose
// context can be (and none for an Exec), which charged the cases that read
// a row back a cost the floor UPDATE did not pay. The run's cancellation
// still stops it between operations.
func TestRunOpContext(t *testing.T) {
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	defer cancel()
	e := &Env{Count: &Counter{}}
	var prepared, done int
	op := Op{
		Prepare: func(ctx context.Context) error {
			if ctx.Done() != nil {
				t.Error("Prepare got a cancellable context")
			}
			prepared++
			return nil
		},
		Do: func(ctx context.Context) error {
			if ctx.Done() != nil {
				t.Error("Do got a cancellable context")
			}
			if ctx.Value(key{}) != "v" {
				t.Error("Do lost the context's values")
			}
			done++
			if done == 3 {
				cancel()
			}
			return nil
		},
	}
	var s sample
	err := s.run(ctx, e, op, 10, 10, 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run after cancel: %v, want context.Canceled", err)
	}
	if done != 3 || prepared != 3 || len(s.durs) != 3 {
		t.Errorf("ran %d (prepared %d, timed %d), want 3: the cancel stops the run before the next operation", done, prepared, len(s.durs))
	}
}
