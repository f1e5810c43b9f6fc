package fence

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

type recorder struct {
	mu     sync.Mutex
	events []string
}

type ctxMark struct{}

func (r *recorder) Observe(ctx context.Context, op Op, lease string) (context.Context, func(Event)) {
	return context.WithValue(ctx, ctxMark{}, op), func(e Event) {
		r.mu.Lock()
		defer r.mu.Unlock()
		outcome := "ok"
		switch {
		case errors.Is(e.Err, ErrHeld):
			outcome = "held"
		case errors.Is(e.Err, ErrLost):
			outcome = "lost"
		case e.Err != nil:
			outcome = "error"
		}
		r.events = append(r.events, string(op)+" "+lease+" "+outcome+" "+string(e.Status))
	}
}

func TestObserverSeesOperations(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	s, err := testOpen(ctx, "sqlite:"+filepath.Join(t.TempDir(), "o.db"), WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Acquire(ctx, "job", time.Minute)
	s.Acquire(ctx, "job", time.Minute)
	id, _ := s.StartRun(ctx, a.Token, nil)
	s.Renew(ctx, a.Token, time.Minute)
	s.Revoke(ctx, "job")
	s.Renew(ctx, a.Token, time.Minute)
	s.FinishRun(ctx, a.Token, id, Completion{})
	want := []string{
		"acquire job ok ", "acquire job held ", "start_run job ok running", "renew job ok ",
		"revoke job ok ", "renew job lost ", "finish_run job lost lost",
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != len(want) {
		t.Fatalf("events %q", rec.events)
	}
	for i := range want {
		if rec.events[i] != want[i] {
			t.Fatalf("event %d: %q, want %q (all %q)", i, rec.events[i], want[i], rec.events)
		}
	}
}
