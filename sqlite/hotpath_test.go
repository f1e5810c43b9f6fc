package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

func openFile(t *testing.T, ctx context.Context) *fence.Store {
	t.Helper()
	s, err := fencedsn.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "hot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// A refused acquire and is-held are reads: they answer while another
// connection holds the database write lock, where a statement that asked
// for the lock would wait out busy_timeout (10 s, longer than the deadline
// here) behind it.
func TestRefusalAndIsHeldTakeNoWriteLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openFile(t, ctx)
	l, err := s.Acquire(ctx, "x", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	var held *fence.HeldError
	if _, err := s.Acquire(rctx, "x", time.Hour); !errors.As(err, &held) || held.Fence != l.Token.Fence || held.Remaining <= 0 {
		t.Fatalf("acquire of a held lease under another's write lock: %v (%+v), want ErrHeld with fence %d", err, held, l.Token.Fence)
	}
	if ok, err := s.IsHeld(rctx, l.Token); err != nil || !ok {
		t.Fatalf("IsHeld under another's write lock: %v, %v", ok, err)
	}
}

// Renew and the takeover of a lapsed lease bind their clock instead of
// reading back what they wrote: what they report is what the row holds.
func TestRenewAndTakeoverReportWhatTheRowHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openFile(t, ctx)
	a, err := s.Acquire(ctx, "r", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	until, err := s.Renew(ctx, a.Token, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Get(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if !info.ExpiresAt.Equal(until) {
		t.Fatalf("renew reported %v, the row has %v", until, info.ExpiresAt)
	}
	if err := s.Release(ctx, a.Token); err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, "r", time.Hour) // the row exists: compare-and-set
	if err != nil {
		t.Fatal(err)
	}
	info, err = s.Get(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if b.Token.Fence <= a.Token.Fence || info.Fence != b.Token.Fence || !info.ExpiresAt.Equal(b.ExpiresAt) {
		t.Fatalf("takeover: fence %d after %d, expires %v; the row: fence %d, expires %v",
			b.Token.Fence, a.Token.Fence, b.ExpiresAt, info.Fence, info.ExpiresAt)
	}
}

// An acquisition first tries the fence its own Driver left at its last
// release; when another handle (another process) acquired and released in
// between, that try matches nothing and the acquisition still succeeds
// above the newer fence.
func TestAcquireAfterOwnReleaseWhenRowMovedOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "moved.db")
	s1, err := fencedsn.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	if _, err := s1.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s2, err := fencedsn.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	last := int64(0)
	for round := range 4 {
		a, err := s1.Acquire(ctx, "m", time.Hour)
		if err != nil || a.Token.Fence <= last {
			t.Fatalf("round %d: s1 acquire: fence %d after %d, %v", round, a.Token.Fence, last, err)
		}
		if err := s1.Release(ctx, a.Token); err != nil {
			t.Fatal(err)
		}
		last = a.Token.Fence
		if round%2 == 0 {
			// The row moves on behind s1's back.
			b, err := s2.Acquire(ctx, "m", time.Hour)
			if err != nil || b.Token.Fence <= last {
				t.Fatalf("round %d: s2 acquire: fence %d after %d, %v", round, b.Token.Fence, last, err)
			}
			last = b.Token.Fence
			if round == 2 {
				// Still held by s2: s1 must be refused, not take it over.
				if _, err := s1.Acquire(ctx, "m", time.Hour); !errors.Is(err, fence.ErrHeld) {
					t.Fatalf("round %d: s1 acquired a lease s2 holds: %v", round, err)
				}
			}
			if err := s2.Release(ctx, b.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
}
