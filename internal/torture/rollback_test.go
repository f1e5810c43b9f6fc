package torture

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/testdb"
)

// TestExtResource: the external resource reports one fence carried by two
// owners, whether it was handed out or written, and refuses a write below
// the highest fence written (what ExecResource does) without calling it a
// violation: after a rollback the database can accept such a write.
func TestExtResource(t *testing.T) {
	r := newExtResource()
	if v := r.see(10, "a", "handed out"); v != "" {
		t.Fatalf("first sight of fence 10: %s", v)
	}
	if v := r.write(10, "a"); v != "" || r.accepted != 1 {
		t.Fatalf("a writes at its own fence: %q, accepted %d", v, r.accepted)
	}
	if v := r.write(20, "b"); v != "" || r.accepted != 2 {
		t.Fatalf("b writes at a higher fence: %q, accepted %d", v, r.accepted)
	}
	if v := r.write(10, "a"); v != "" || r.refused != 1 {
		t.Fatalf("a (revived by a rollback) writes below the highest fence: %q, refused %d, want no violation and one refusal", v, r.refused)
	}
	if v := r.see(20, "c", "handed out"); !strings.Contains(v, "fence 20") {
		t.Fatalf("fence 20 handed to c after b carried it: %q, want a violation", v)
	}
	if v := r.write(20, "c"); v == "" || r.accepted != 3 {
		t.Fatalf("c writes at b's fence: %q, accepted %d: the resource cannot refuse it, and it must be reported", v, r.accepted)
	}
}

// TestDirectCheckFenceReuse: after a rollback resets a lease's facts to the
// restored row, an acquisition may pass every check of the database's own
// history (its fence is above the restored one) and still reuse a fence
// committed before the rollback: the log check reports that, and does not
// for a fence above every one committed before.
func TestDirectCheckFenceReuse(t *testing.T) {
	h := &harness{leases: []string{"l"}}
	f := &leaseFacts{}
	var res resolution
	before := []event{{Lease: "l", Seq: 1, Kind: "acquire", Fence: 5, Owner: "a", UntilMs: 1150, AtMs: 1000},
		{Lease: "l", Seq: 2, Kind: "acquire", Fence: 6, Owner: "b", UntilMs: 1300, AtMs: 1150}}
	ops := []op{{ID: 1, Kind: opAcquire, Res: resOK, Owner: "a", Out: output{Res: resOK, Fence: 5}},
		{ID: 2, Kind: opAcquire, Res: resOK, Owner: "b", Out: output{Res: resOK, Fence: 6}}}
	if vs := f.check(h, 0, 0, ops, before, 0, 0, [2]int64{900, 1400}, &res); len(vs) != 0 {
		t.Fatalf("before the rollback: %+v", vs)
	}
	// The rollback: the row is a's again (fence 5, lapsed).
	f.fence, f.owner, f.until = 5, "a", 1150
	for _, c := range []struct {
		fence int64
		reuse bool
	}{{6, true}, {7, false}} {
		g := *f
		g.issued = map[int64]string{5: "a", 6: "b"}
		after := []event{{Lease: "l", Seq: 3, Kind: "acquire", Fence: c.fence, Owner: "c", UntilMs: 1600, AtMs: 1500}}
		op := []op{{ID: 3, Kind: opAcquire, Res: resOK, Owner: "c", Out: output{Res: resOK, Fence: c.fence}}}
		vs := g.check(h, 1, 0, op, after, 0, 0, [2]int64{1400, 1700}, &res)
		got := len(vs) == 1 && vs[0].Check == "external: fence reused (log)"
		if c.reuse != got || !c.reuse && len(vs) != 0 {
			t.Errorf("acquisition of fence %d after the rollback: violations %+v, want reuse reported: %v", c.fence, vs, c.reuse)
		}
	}
}

// TestModelRevivedGeneration: a window that starts from a restored row
// whose generation is valid again (its holder still has the token) lets
// that holder write, although a newer generation wrote the protected row
// before the rollback, and refuses the newer generation's token.
func TestModelRevivedGeneration(t *testing.T) {
	init := state{Fence: 5, Valid: true, WFence: 9, Cnt: 4} // b (fence 9) wrote before the rollback
	ops := []porcupine.Operation{
		{ClientId: 0, Input: input{Kind: opWrite, Fence: 5}, Output: output{Res: resOK}, Call: 1, Return: 2},
		{ClientId: 1, Input: input{Kind: opWrite, Fence: 9}, Output: output{Res: resRefused}, Call: 3, Return: 4},
		{ClientId: 2, Input: input{Kind: opRead}, Output: output{Res: resOK, WFence: 5, Cnt: 5}, Call: 5, Return: 6},
	}
	if !porcupine.CheckOperations(newModel(init), ops) {
		t.Fatal("the revived generation's write is not linearizable from the restored state")
	}
	ops[1].Output = output{Res: resOK}
	if porcupine.CheckOperations(newModel(init), ops) {
		t.Fatal("the forgotten generation's write was accepted by the model")
	}
}

// TestRollbackRestore runs the fault's own SQL on each database: a snapshot
// of the lease table, a takeover after it, the restore. The restored row is
// the snapshot's (owner and fence), the takeover is forgotten, and the next
// acquisition's fence is above every fence handed out before the restore
// (fence's floor from the database clock: with fence+1 it was the
// forgotten takeover's fence again).
func TestRollbackRestore(t *testing.T) {
	for _, b := range []struct{ name, dsn string }{
		{"sqlite", "sqlite:" + filepath.Join(t.TempDir(), "r.db")}, {"postgres", testdb.PostgresDSN()}, {"mysql", testdb.MySQLDSN()},
	} {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			prefix := testdb.Prefix()
			s, err := fencedsn.Open(ctx, b.dsn, fence.WithPrefix(prefix))
			if err != nil {
				testdb.Unreachable(t, b.name, "", err)
			}
			defer s.Close()
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.DropTables(context.Background())
			sc := newSchema(s.Dialect(), prefix)
			if err := sc.setup(ctx, s.DB(), []string{"r"}); err != nil {
				t.Fatal(err)
			}
			defer sc.drop(context.Background(), s.DB())
			a, err := s.Acquire(ctx, "r", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if err := sc.snapshot(ctx, s.DB()); err != nil {
				t.Fatal(err)
			}
			rev, err := s.Revoke(ctx, "r")
			if err != nil {
				t.Fatal(err)
			}
			b2, err := s.Acquire(ctx, "r", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := sc.restore(ctx, s.DB(), 0); err != nil {
				t.Fatal(err)
			}
			row, err := sc.readLease(ctx, s.DB(), "r")
			if err != nil {
				t.Fatal(err)
			}
			if row.owner != a.Token.Owner || row.fence != a.Token.Fence || row.state != "held" {
				t.Fatalf("restored row %+v, want a's generation (fence %d)", row, a.Token.Fence)
			}
			// a's token works again: the database forgot the takeover.
			if ok, err := s.IsHeld(ctx, a.Token); !ok || err != nil {
				t.Fatalf("IsHeld(a) after the restore: %v, %v", ok, err)
			}
			if _, err := s.Revoke(ctx, "r"); err != nil {
				t.Fatal(err)
			}
			c, err := s.Acquire(ctx, "r", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, old := range []int64{a.Token.Fence, rev, b2.Token.Fence} {
				if c.Token.Fence <= old {
					t.Errorf("after the restore, fence %d was handed out again or below one handed out before (%d): a %d, revoke %d, b %d",
						c.Token.Fence, old, a.Token.Fence, rev, b2.Token.Fence)
				}
			}
		})
	}
}

// TestTortureRollbackControl: with the old fence rule (the control's test
// triggers) the rollback fault must make the external checker report a
// fence handed out twice. This is the proof that the external-checker
// invariant can fail; with fence's floor the same runs report none (the
// torture tests above run the rollback fault as part of "all").
func TestTortureRollbackControl(t *testing.T) {
	testdb.Long(t)
	reachable(t, "postgres torture", "FENCE_TEST_POSTGRES", testdb.PostgresDSN())
	faults, _ := ParseFaults("pause,skew,cancel,rollback")
	cfg := Config{DSN: testdb.PostgresDSN(), Clients: 8, Leases: 3, Duration: max(duration(t), 8*time.Second), Window: time.Second,
		Faults: faults, Seed: uint64(time.Now().UnixNano()), Out: t.TempDir(), OldFenceRule: true, CheckTimeout: 3 * time.Second}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r.WriteSummary(&b)
	t.Log("\n" + b.String())
	ext := 0
	for _, v := range r.Violations {
		if strings.HasPrefix(v.Check, "external:") {
			ext++
		}
	}
	if r.FaultCount[FaultRollback] == 0 {
		t.Fatalf("no rollback was injected in %v (seed %d)", cfg.Duration, r.Seed)
	}
	if ext == 0 {
		t.Fatalf("the old fence rule with %d rollbacks: no external-checker violation (seed %d): the invariant cannot fail", r.FaultCount[FaultRollback], r.Seed)
	}
}

func TestOldFenceRuleNeedsPostgres(t *testing.T) {
	_, err := Run(context.Background(), Config{DSN: "sqlite:" + filepath.Join(t.TempDir(), "t.db"), Duration: time.Second, OldFenceRule: true})
	if err == nil || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Fatalf("Run with OldFenceRule on SQLite: %v, want an error asking for PostgreSQL", err)
	}
}

// TestShapes runs every write shape on each database: with the holder's
// token it writes the protected row once and the log records it under the
// shape's kind with the token's fence; with a stale token (after a
// takeover) fence refuses it with ErrLost and nothing is logged. MariaDB
// leaves out the CTE shape (no WITH before UPDATE), which the probe must
// say.
func TestShapes(t *testing.T) {
	kinds := map[string]string{shapePlain: "stmt", shapeOr: "or", shapeDelete: "delete", shapeInsert: "insert",
		shapeInsertIgnore: "insign", shapeCTE: "cte", shapeJoin: "join"}
	for _, b := range []struct{ name, dsn string }{
		{"sqlite", "sqlite:" + filepath.Join(t.TempDir(), "s.db")}, {"postgres", testdb.PostgresDSN()}, {"mysql", testdb.MySQLDSN()},
	} {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			prefix := testdb.Prefix()
			s, err := fencedsn.Open(ctx, b.dsn, fence.WithPrefix(prefix))
			if err != nil {
				testdb.Unreachable(t, b.name, "", err)
			}
			defer s.Close()
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.DropTables(context.Background())
			sc := newSchema(s.Dialect(), prefix)
			if err := sc.setup(ctx, s.DB(), []string{"r"}); err != nil {
				t.Fatal(err)
			}
			defer sc.drop(context.Background(), s.DB())
			shapes, skipped := sc.probeShapes(ctx, s.DB())
			if _, ok := skipped[shapeCTE]; ok != (len(shapes) == len(allShapes)-1) || len(skipped) > 1 {
				t.Fatalf("probe: shapes %v, skipped %v", shapes, skipped)
			}
			t.Logf("shapes %v, skipped %v", shapes, skipped)
			old, err := s.Acquire(ctx, "r", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Revoke(ctx, "r"); err != nil {
				t.Fatal(err)
			}
			cur, err := s.Acquire(ctx, "r", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			id := int64(100)
			for _, sh := range append([]string{shapePlain}, shapes...) {
				seq, err := sc.clockSeq(ctx, s.DB(), "r")
				if err != nil {
					t.Fatal(err)
				}
				for _, tok := range []fence.Token{old.Token, cur.Token} {
					id++
					ss := sc.shapeSQL(sh, tok, "r", id)
					if ss.pre != "" {
						if _, err := s.DB().ExecContext(ctx, ss.pre, ss.preArgs...); err != nil {
							t.Fatalf("%s: %v", sh, err)
						}
					}
					n, err := s.Exec(ctx, tok, ss.q, ss.args...)
					stale := tok == old.Token
					switch {
					case stale && !errors.Is(err, fence.ErrLost):
						t.Errorf("%s with the revoked token: n %d, err %v, want ErrLost", sh, n, err)
					case !stale && (err != nil || n != 1):
						t.Errorf("%s with the holder's token: n %d, err %v, want 1 row", sh, n, err)
					}
				}
				evs, err := sc.eventsSince(ctx, s.DB(), "r", seq)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) != 1 || evs[0].Kind != kinds[sh] || evs[0].Fence != cur.Token.Fence || evs[0].OpID != id {
					t.Errorf("%s: logged %+v, want one %q write of fence %d, op %d (the stale one must leave nothing)", sh, evs, kinds[sh], cur.Token.Fence, id)
				}
			}
		})
	}
}
