package bench

import (
	"context"
	"errors"
	"strings"
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
	if done != 3 || len(s.durs) != 3 {
		t.Errorf("ran %d (timed %d), want 3: the cancel stops the run before the next operation", done, len(s.durs))
	}
}

// Prepare runs right after its case's Do, so that, one operation per turn,
// a Do is preceded by the case that ran before it and not by its own
// Prepare; the state carries over between runs, so Prepare runs once
// between two Do.
func TestRunPrepareAfterDo(t *testing.T) {
	ctx := context.Background()
	e := &Env{Count: &Counter{}}
	var log []string
	a := Op{
		Prepare: func(context.Context) error { log = append(log, "Pa"); return nil },
		Do:      func(context.Context) error { log = append(log, "Da"); return nil },
	}
	b := Op{Do: func(context.Context) error { log = append(log, "Db"); return nil }}
	var sa, sb sample
	for range 3 {
		for _, x := range []struct {
			s  *sample
			op Op
		}{{&sa, a}, {&sb, b}} {
			if err := x.s.run(ctx, e, x.op, 1, 1, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := strings.Join(log, " ")
	if want := "Pa Da Pa Db Da Pa Db Da Pa Db"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	if len(sa.durs) != 3 || len(sb.durs) != 3 {
		t.Errorf("timed %d and %d, want 3 each", len(sa.durs), len(sb.durs))
	}
}
