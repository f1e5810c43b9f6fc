package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

func sweepCases() []suiteCase {
	return []suiteCase{
		{"RunSweepWaitsForRenewalInFlight", sweepRenewalInFlight},
	}
}

// sweepIsolations are the session isolation levels the sweeper runs at:
// the store's own, and where the database has them, READ COMMITTED and
// REPEATABLE READ set on a one-connection pool. "" is the store as opened.
func sweepIsolations(s *fence.Store) map[string]string {
	out := map[string]string{"default": ""}
	if s.DB() == nil {
		return out // a pgx pool: its sessions cannot be pinned from here
	}
	switch s.Dialect() {
	case fence.MySQL:
		out["read-committed"] = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
		out["repeatable-read"] = "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"
	case fence.Postgres:
		out["read-committed"] = "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED"
		out["repeatable-read"] = "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ"
	}
	return out
}

// A renewal that the database evaluated while the lease was valid, but has
// not committed yet, keeps the generation valid: the sweep must wait for it
// (lock, then judge) rather than mark the live run lost from an older row
// version. The renewal runs in the case's own transaction, committed only
// after the old expiry has passed and the sweep has started: a commit
// delayed at the worst moment. On MySQL/MariaDB under READ COMMITTED the
// sweep's NOT EXISTS read a snapshot and marked the run lost in every round,
// and the holder's completion was then refused while IsHeld said true.
func sweepRenewalInFlight(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	for name, set := range sweepIsolations(s) {
		sweeper := s
		if set != "" {
			sweeper = b.Open(t, s.Prefix())
			sweeper.DB().SetMaxOpenConns(1)
			sweeper.DB().SetMaxIdleConns(1)
			sweeper.DB().SetConnMaxLifetime(0)
			sweeper.DB().SetConnMaxIdleTime(0)
			if _, err := sweeper.DB().ExecContext(ctxT(t), set); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		for round := range 2 {
			if sweepRound(t, s, sweeper, "job-"+name+"-"+strconv.Itoa(round)) {
				t.Errorf("%s: the sweep marked a live run lost", name)
			}
		}
	}
}

// sweepRound reports whether the sweep marked the live run lost.
func sweepRound(t *testing.T, s, sweeper *fence.Store, lease string) bool {
	t.Helper()
	ctx := ctxT(t)
	h := handleFor(s)
	// The renewal must reach the database within the TTL; on a loaded
	// machine the TTL grows until it does.
	for ttl := 500 * time.Millisecond; ; ttl *= 2 {
		if ttl > time.Minute {
			t.Fatal("the renewal never reached the database within the lease's TTL")
		}
		tok := mustAcquire(t, s, lease, ttl)
		id, err := s.StartRun(ctx, tok, nil)
		if errors.Is(err, fence.ErrLost) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		before, err := s.Get(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := h.begin(ctx, sql.LevelDefault)
		if err != nil {
			t.Fatal(err)
		}
		now := s.NowSQL()
		n, err := tx.exec(ctx, s.Rebind("UPDATE "+s.Prefix()+"leases SET leased_until_ms = "+now+" + 60000"+
			" WHERE lease_name = ? AND owner_token = ? AND fence_token = ? AND leased_until_ms > "+now), lease, tok.Owner, tok.Fence)
		if err != nil {
			tx.rollback(ctx)
			t.Fatal(err)
		}
		if n == 0 {
			tx.rollback(ctx)
			if err := s.MarkRunLost(ctx, id, tok.Fence, "test: renewal too late"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for {
			dbNow, err := s.Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if dbNow.After(before.ExpiresAt.Add(5 * time.Millisecond)) {
				break
			}
			time.Sleep(before.ExpiresAt.Sub(dbNow) + 5*time.Millisecond)
		}
		type result struct {
			n   int64
			err error
		}
		swept := make(chan result, 1)
		go func() {
			n, err := sweeper.SweepRuns(ctx)
			swept <- result{n, err}
		}()
		// A sweep that judges from a snapshot returns at once; one that
		// waits for the renewal does not return before the commit. Give the
		// first kind the time to show itself.
		var r result
		got := false
		select {
		case r = <-swept:
			got = true
		case <-time.After(time.Second):
		}
		if err := tx.commit(ctx); err != nil {
			// A multi-primary cluster (MariaDB Galera) has no lock across
			// nodes for the sweep to wait on: the first COMMIT wins, and the
			// renewal's fails certification when the sweep, through another
			// node, got in first. The run was then not live: the lease must
			// not be held.
			if !got {
				r = <-swept
			}
			if held, herr := s.IsHeld(ctx, tok); herr != nil || held {
				t.Fatalf("the renewal's COMMIT failed (%v), yet the lease is held (%v, %v)", err, held, herr)
			}
			t.Logf("%s: the sweep committed first (marked %d, %v); the renewal's COMMIT was refused: %v", lease, r.n, r.err, err)
			return false
		}
		if !got {
			r = <-swept
		}
		// A serialization failure (PostgreSQL REPEATABLE READ) or a busy
		// database (SQLite) refuses the sweep rather than misjudge it: sweep
		// again now that the renewal is in.
		if r.err != nil {
			t.Logf("%s: the sweep was refused, sweeping again: %v", lease, r.err)
		}
		for attempt := 0; r.err != nil && fence.IsRetryable(r.err) && attempt < 20; attempt++ {
			r.n, r.err = sweeper.SweepRuns(ctx)
		}
		if r.err != nil {
			t.Fatalf("sweep: %v", r.err)
		}
		held, err := s.IsHeld(ctx, tok)
		if err != nil || !held {
			t.Fatalf("the renewal committed but the lease is not held: %v", err)
		}
		run, err := s.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ferr := s.FinishRun(context.WithoutCancel(ctx), tok, id, fence.Completion{})
		lost := r.n > 0 || run.Status != fence.RunRunning || ferr != nil
		if lost {
			t.Logf("%s: sweep marked %d, run %s, holder's completion: %v", lease, r.n, run.Status, ferr)
		}
		return lost
	}
}
