package torture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/nemesis"
	"github.com/fencekit/fence/internal/testdb"
)

// TestPGAutoFailoverPartition: pg_auto_failover under a partition (issue
// 31). A formation of clusters/pg-auto-partition.sh (node a primary, node b
// its synchronous secondary, the monitor, each in a namespace of its own);
// node a is cut off from the monitor and from node b, both ways, while its
// clients (the root namespace) still reach it. Clients of node a and of
// node b acquire one lease again and again and write with their fences to
// an external resource that accepts a fence not below the highest it has
// seen; b's side runs `raise-fences` (Store.RaiseFences(ctx, 0)) right
// after it sees b promoted, as docs/CLUSTERS.md says a failover hook does.
//
// With the settings the script uses (replication quorum, the monitor's
// health checks at 1-2 s, the keepers' network_partition_timeout 3 s), the
// old primary acknowledges nothing while it is cut off (its commits wait
// for the secondary) and its keeper stops it after the partition timeout;
// the monitor promotes b. The resource must never accept a write of an
// owner of node a after one of node b, and node a must acknowledge no
// acquisition after the cut.
func TestPGAutoFailoverPartition(t *testing.T) {
	testdb.Long(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root (ip netns, runuser)")
	}
	if _, err := exec.LookPath("pg_autoctl"); err != nil {
		t.Skip("pg_autoctl not installed (apt-get install postgresql-15-auto-failover)")
	}
	pgbin := os.Getenv("PGBIN")
	if pgbin == "" {
		pgbin = "/usr/lib/postgresql/15/bin"
	}
	ctx := context.Background()
	n := nemesis.Net{Prefix: fmt.Sprintf("fpa%d", os.Getpid()%10000), Nodes: 3, Subnet: "10.79.0"}
	if err := n.Up(ctx); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "fence-pgauto-")
	if err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../../clusters/pg-auto-partition.sh")
	if err != nil {
		t.Fatal(err)
	}
	sh := func(args ...string) error {
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.Env = append(os.Environ(), "PGBIN="+pgbin)
		out, err := cmd.CombinedOutput()
		t.Logf("pg-auto-partition.sh %s:\n%s", args[0], out)
		return err
	}
	t.Cleanup(func() {
		_ = sh("down", dir)
		if err := n.Down(context.Background()); err != nil {
			t.Error(err)
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("kept %s", dir)
		}
	})
	if err := sh("up", dir, n.Prefix, n.Subnet); err != nil {
		t.Fatalf("formation did not come up: %v", err)
	}
	dsn := func(i int) string {
		return fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=disable&connect_timeout=2", n.Addr(i), 5470+i)
	}
	oldSt := openSplitStore(t, dsn(1))
	if _, err := oldSt.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// fencedsn.Open refuses a standby (its session checks write): node b's
	// store is opened once it has been promoted.
	var newSt *fence.Store
	t.Cleanup(func() {
		if newSt != nil {
			newSt.Close()
		}
	})
	// Node b has the schema and is the synchronous standby.
	waitFor(t, "node b streaming, in sync", func() bool {
		var ok bool
		q := "SELECT count(*) > 0 FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum') AND replay_lsn = pg_current_wal_lsn()"
		return oldSt.DB().QueryRowContext(ctx, q).Scan(&ok) == nil && ok
	})
	// Before the cut, node a acknowledges (the test can tell "refused
	// under the partition" from "never worked").
	if _, err := oldSt.Acquire(ctx, "before", time.Second); err != nil {
		t.Fatalf("node a does not acknowledge an acquisition before the cut: %v", err)
	}

	// The cut: node a from b and from the monitor, both ways.
	cut := time.Now()
	for _, c := range [][2]int{{1, 2}, {2, 1}, {1, 3}, {3, 1}} {
		if err := n.Drop(ctx, c[0], c[1]); err != nil {
			t.Fatal(err)
		}
	}
	var r splitResult
	var promoted, oldDown time.Duration
	var raised bool
	var maxFence int64
	last := ""
	accept := func(side string, f int64) {
		if f < maxFence {
			return
		}
		maxFence = f
		if side == "old" {
			r.accOld++
		} else {
			r.accNew++
		}
		if last != "" && last != side {
			r.switches++
			if side == "old" {
				r.backToOld++
			}
		}
		last = side
	}
	end := cut.Add(15 * time.Second) // b is promoted 3-6 s after the cut
	for time.Now().Before(end) {
		for _, side := range []string{"old", "new"} {
			if side == "new" && newSt == nil {
				octx, cancel := context.WithTimeout(ctx, 2*time.Second)
				s, err := fencedsn.Open(octx, dsn(2))
				cancel()
				if err != nil {
					continue
				}
				newSt = s
				promoted = time.Since(cut)
			}
			st := newSt
			if side == "old" {
				st = oldSt
			}
			if side == "new" && !raised {
				// The failover hook's raise-fences, right after the promotion.
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := newSt.RaiseFences(cctx, 0)
				cancel()
				if err != nil {
					t.Logf("raise-fences on node b after the promotion: %v (retried)", err)
					continue
				}
				raised = true
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			l, err := st.Acquire(cctx, "split", 300*time.Millisecond)
			cancel()
			switch {
			case err == nil:
				if side == "old" {
					r.oldOK++
				} else {
					r.newOK++
				}
				accept(side, l.Token.Fence)
			case side == "old" && !errors.Is(err, fence.ErrHeld):
				r.oldFail++
				if errors.Is(err, fence.ErrAmbiguous) {
					r.oldAmb++
				}
				if oldDown == 0 && !oldAnswers(ctx, oldSt) {
					oldDown = time.Since(cut)
				}
			}
		}
		time.Sleep(150 * time.Millisecond)
	}
	state, _ := exec.Command("bash", script, "state", dir).CombinedOutput()
	down := "still answered reads at the end"
	if oldDown > 0 {
		down = fmt.Sprintf("stopped answering %v after the cut", oldDown.Round(time.Millisecond))
	}
	t.Logf("pg_auto_failover, node a cut off from b and the monitor for %v: old primary: %d acquisitions acknowledged, %d calls failed (%d ambiguous), %s; node b promoted %v after the cut, raise-fences %v; new primary: %d acknowledged; resource accepted %d writes from node a's owners, %d from node b's, owner changes %d (%d back to node a); monitor: %s",
		time.Since(cut).Round(time.Millisecond), r.oldOK, r.oldFail, r.oldAmb, down, promoted.Round(time.Millisecond), raised, r.newOK, r.accOld, r.accNew, r.switches, r.backToOld, state)
	if r.oldOK != 0 || r.accOld != 0 || r.backToOld != 0 {
		t.Fatalf("the cut-off old primary acknowledged %d acquisitions; the resource accepted %d of its owners' writes (%d after an owner of the new primary)", r.oldOK, r.accOld, r.backToOld)
	}
	if promoted == 0 || r.newOK == 0 {
		t.Fatalf("node b was not promoted (%v) or acknowledged nothing (%d): the test shows nothing", promoted, r.newOK)
	}
}

// oldAnswers reports whether the old primary still answers a query.
func oldAnswers(ctx context.Context, st *fence.Store) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return st.DB().PingContext(cctx) == nil
}
