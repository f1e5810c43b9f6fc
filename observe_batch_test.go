package fence

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// observed is one observation: the op and lease given to Observe, the op of
// the context it was called with (ctxMark, set by an enclosing
// observation), and the event it ended with.
type observed struct {
	op, outer Op
	lease     string
	e         Event
}

type eventLog struct {
	mu  sync.Mutex
	obs []observed
}

func (l *eventLog) Observe(ctx context.Context, op Op, lease string) (context.Context, func(Event)) {
	outer, _ := ctx.Value(ctxMark{}).(Op)
	return context.WithValue(ctx, ctxMark{}, op), func(e Event) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.obs = append(l.obs, observed{op: op, outer: outer, lease: lease, e: e})
	}
}

func (l *eventLog) take() []observed {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.obs
	l.obs = nil
	return o
}

func openObserved(t *testing.T, o Observer) *Store {
	t.Helper()
	s, err := testOpen(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "o.db"), WithObserver(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRenewBatchObservesEachToken(t *testing.T) {
	ctx := t.Context()
	log := &eventLog{}
	s := openObserved(t, log)
	a, err := s.Acquire(ctx, "shard-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, "shard-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, "shard-b"); err != nil {
		t.Fatal(err)
	}
	log.take()

	if _, err := s.RenewBatch(ctx, []Token{a.Token, b.Token}, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	obs := log.take()
	if len(obs) != 3 {
		t.Fatalf("observations %+v, want 3", obs)
	}
	ta, tb, batch := obs[0], obs[1], obs[2]
	if ta.op != OpRenewBatchToken || ta.outer != OpRenewBatch || ta.lease != "shard-a" ||
		ta.e.Fence != a.Token.Fence || ta.e.Err != nil || ta.e.ExpiresIn != 2*time.Minute {
		t.Errorf("renewed token: %+v", ta)
	}
	var le *LostError
	if tb.op != OpRenewBatchToken || tb.outer != OpRenewBatch || tb.lease != "shard-b" ||
		tb.e.Fence != b.Token.Fence || !errors.As(tb.e.Err, &le) || le.Reason != LostRevoked || tb.e.ExpiresIn != 0 {
		t.Errorf("refused token: %+v", tb)
	}
	if batch.op != OpRenewBatch || batch.lease != "" || batch.e.Err != nil || batch.e.Count != 2 || batch.e.Lost != 1 {
		t.Errorf("batch: %+v", batch)
	}

	// A batch that fails as a whole reports its error for every token.
	if _, err := s.RenewBatch(ctx, []Token{a.Token, b.Token}, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("batch with TTL 0: %v", err)
	}
	obs = log.take()
	if len(obs) != 3 {
		t.Fatalf("observations %+v, want 3", obs)
	}
	for i, lease := range []string{"shard-a", "shard-b"} {
		if o := obs[i]; o.op != OpRenewBatchToken || o.lease != lease || !errors.Is(o.e.Err, ErrInvalid) {
			t.Errorf("token %d of a failed batch: %+v", i, o)
		}
	}
	if o := obs[2]; o.op != OpRenewBatch || !errors.Is(o.e.Err, ErrInvalid) || o.e.Count != 2 {
		t.Errorf("failed batch: %+v", o)
	}

	// An empty batch has no tokens to report.
	if _, err := s.RenewBatch(ctx, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if obs = log.take(); len(obs) != 1 || obs[0].op != OpRenewBatch || obs[0].e.Count != 0 {
		t.Errorf("empty batch: %+v", obs)
	}
}

func TestMarkRunLostObserved(t *testing.T) {
	ctx := t.Context()
	log := &eventLog{}
	s := openObserved(t, log)
	a, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.StartRun(ctx, a.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := log.take(); len(o) != 2 || o[1].op != OpStartRun || o[1].e.Run != id {
		t.Fatalf("start run: %+v", o)
	}
	for i, want := range []RunStatus{RunLost, ""} { // the second finds it no longer running
		if err := s.MarkRunLost(ctx, id, a.Token.Fence, "worker gave up"); err != nil {
			t.Fatal(err)
		}
		obs := log.take()
		if len(obs) != 1 {
			t.Fatalf("mark %d: observations %+v", i, obs)
		}
		if o := obs[0]; o.op != OpMarkRunLost || o.lease != "job" || o.e.Run != id ||
			o.e.Fence != a.Token.Fence || o.e.Err != nil || o.e.Status != want {
			t.Errorf("mark %d: %+v, want status %q", i, o, want)
		}
	}
	// A run that does not exist: no lease to name, nothing marked.
	if err := s.MarkRunLost(ctx, id+100, a.Token.Fence, "x"); err != nil {
		t.Fatal(err)
	}
	if obs := log.take(); len(obs) != 1 || obs[0].lease != "" || obs[0].e.Status != "" {
		t.Errorf("mark of a missing run: %+v", obs)
	}
}
