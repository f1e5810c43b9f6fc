package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
)

// TestGaleraStaleWriteRounds repeats the stale-write scenario with the
// nodes drawn at random: A acquires through one node, B revokes and takes
// over through another, then A writes through a third (any node), in half
// the rounds with that node's applier lagging (always for the control). Every write is started after
// B's takeover returned, so any of A's writes that commits is stale. The
// fence paths (Exec, InTx, ExecIn in the caller's transaction) must never
// commit one; the old single-statement guard, run in the same rounds as the
// control, must be caught committing some.
func TestGaleraStaleWriteRounds(t *testing.T) {
	c := galeraCluster(t)
	prefix := testdb.Prefix()
	ctx := ctxG(t)
	n := len(c.dsns)
	stores := make([]*fence.Store, n)
	for i, dsn := range c.dsns {
		stores[i] = openGaleraStore(t, dsn, prefix)
	}
	if _, err := stores[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	target, lag := prefix+"target", prefix+"lag"
	t.Cleanup(func() {
		stores[0].DropTables(context.Background())
		for _, tbl := range []string{target, lag} {
			c.dbs[0].ExecContext(context.Background(), "DROP TABLE IF EXISTS "+tbl)
		}
	})
	mustExec(t, c.dbs[0], "CREATE TABLE "+target+" (id INT PRIMARY KEY, v VARCHAR(32) NOT NULL) ENGINE=InnoDB")
	mustExec(t, c.dbs[0], "CREATE TABLE "+lag+" (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB")
	mustExec(t, c.dbs[0], "INSERT INTO "+lag+" VALUES (1, 0)")

	var writers []staleWriter
	for _, w := range staleWriters(prefix) {
		switch w.name {
		case "predicate", "fence.Exec", "fence.InTx", "fence.ExecIn-tx":
			writers = append(writers, w)
		}
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 18))
	const rounds = 40
	var lagged, violations, controlRounds, controlStale, fenceRounds int
	for round := range rounds {
		w := writers[round%len(writers)]
		na, nb, nw := rng.IntN(n), rng.IntN(n), rng.IntN(n)
		for nb == nw {
			nb = rng.IntN(n)
		}
		// The control always lags, so that it is caught in every round; the
		// fence paths in half of them.
		withLag := w.stale || rng.IntN(2) == 0
		id, name := 1000+round, "round"
		mustExec(t, c.dbs[0], "INSERT INTO "+target+" VALUES (?, 'init')", id)
		var a fence.Lease
		var err error
		for {
			a, err = stores[na].Acquire(ctx, name, time.Minute)
			if err == nil {
				break
			}
			if !errors.Is(err, fence.ErrHeld) && !fence.IsRetryable(err) {
				t.Fatalf("round %d: A's acquire through node %d: %v", round, na+1, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		for _, db := range c.dbs {
			syncRead(t, db, func(c *sql.Conn) error {
				var k int
				return c.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+target+" WHERE id = ?", id).Scan(&k)
			})
		}
		release := func() {}
		if withLag {
			release = lagApplier(t, c.dsns[nw], c.dbs[nb], lag)
		}
		if _, err := stores[nb].Revoke(ctx, name); err != nil {
			t.Fatalf("round %d: revoke through node %d: %v", round, nb+1, err)
		}
		b, err := stores[nb].Acquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatalf("round %d: B's takeover through node %d: %v", round, nb+1, err)
		}
		if withLag {
			if held, err := stores[nw].IsHeld(ctx, a.Token); err == nil && held {
				lagged++
			}
		}
		done := make(chan error, 1)
		go func() { done <- w.write(ctx, stores[nw], c.dbs[nw], a.Token, target, id) }()
		if withLag {
			waitCommitting(t, c.dbs[nw], target, done)
			release()
		}
		var werr error
		select {
		case werr = <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: A's write did not return", round)
		}
		var v string
		syncRead(t, c.dbs[nb], func(c *sql.Conn) error {
			return c.QueryRowContext(ctx, "SELECT v FROM "+target+" WHERE id = ?", id).Scan(&v)
		})
		committed := v == "A"
		if w.stale {
			controlRounds++
			if committed {
				controlStale++
			}
		} else {
			fenceRounds++
			if committed || werr == nil {
				violations++
				t.Errorf("round %d (%s, A node %d, B node %d, write node %d, lag %v): A's stale write: err=%v, row %q",
					round, w.name, na+1, nb+1, nw+1, withLag, werr, v)
			}
		}
		if err := stores[nb].Release(ctx, b.Token); err != nil {
			t.Fatalf("round %d: B's release: %v", round, err)
		}
	}
	t.Logf("seed %d: %d rounds (%d with the writer's node lagging behind the takeover), %d through fence: %d stale commits; control (single-statement share-lock guard): %d of %d rounds committed A's stale write",
		seed, rounds, lagged, fenceRounds, violations, controlStale, controlRounds)
	if controlStale == 0 {
		t.Errorf("control: the share-lock guard never committed a stale write in %d rounds: the rounds cannot catch a broken guard", controlRounds)
	}
}
