package torture

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/testdb"
)

// TestGaleraTorture runs the torture with its clients spread over the nodes
// of the Galera cluster FENCE_TEST_GALERA names (clusters/galera/galera.sh;
// node 1 needs log_bin and log_slave_updates, which galera.sh sets): fence's
// guard must show no violation, and the old single-statement share-lock
// guard (the control, GaleraOldGuard) must be caught committing stale
// writes. The event log is ordered by node 1's binary log (binlog.go): the
// clock row it had before was a shared write that made certification
// refuse the control's stale writes too, so the control could not fail.
// No cluster faults here (clusters/galera/torture.sh adds them): concurrent
// takeovers through other nodes are enough to catch the old guard.
func TestGaleraTorture(t *testing.T) {
	nodes := testdb.GaleraDSNs()
	if len(nodes) < 2 {
		t.Skip("SKIP galera torture: set FENCE_TEST_GALERA to the node DSNs of a Galera cluster (clusters/galera/galera.sh)")
	}
	var dsns []string
	for _, d := range nodes {
		sep := "?"
		if strings.Contains(d, "?") {
			sep = "&"
		}
		dsns = append(dsns, d+sep+"wsrep_sync_wait=7")
	}
	reachable(t, "galera", "FENCE_TEST_GALERA", dsns[0])
	faults, _ := ParseFaults("pause,skew,cancel")
	for _, oldGuard := range []bool{false, true} {
		name := "fence"
		if oldGuard {
			name = "old-guard-control"
		}
		t.Run(name, func(t *testing.T) {
			cfg := Config{DSN: dsns[0], ClientDSNs: dsns, Clients: 9, Leases: 3, Duration: duration(t), Window: time.Second,
				Faults: faults, Seed: uint64(time.Now().UnixNano()), Out: t.TempDir(), GaleraOldGuard: oldGuard}
			if oldGuard {
				cfg.CheckTimeout = 3 * time.Second
			}
			r, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			r.WriteSummary(&b)
			t.Log("\n" + b.String())
			if !strings.HasPrefix(r.CommitOrder, "the admin node's binary log") {
				t.Fatalf("commit order: %s, want the binary log", r.CommitOrder)
			}
			if !oldGuard {
				expectClean(t, r)
				return
			}
			if r.StaleCommits == 0 || len(r.Violations) == 0 {
				t.Fatalf("the old guard ran %d ops and no stale commit was found (violations %d): the torture cannot fail on Galera", r.Ops, len(r.Violations))
			}
		})
	}
}

// TestOtherNodes: the barrier waits for the statements of every server the
// clients use, each once, besides the admin server's own.
func TestOtherNodes(t *testing.T) {
	n1 := "mysql://root@127.0.0.1:3311/fence?wsrep_sync_wait=7"
	n2 := "mysql://root@127.0.0.1:3312/fence?wsrep_sync_wait=7"
	n3 := "mysql://root@127.0.0.1:3313/fence"
	got := otherNodes(n1, []string{n1, n2, n3, n1, n2 + "&x=1"})
	if len(got) != 2 || got[0] != n2 || got[1] != n3 {
		t.Fatalf("otherNodes = %q, want nodes 2 and 3 once each", got)
	}
	if got := otherNodes(n1, nil); len(got) != 0 {
		t.Fatalf("otherNodes without client DSNs = %q, want none", got)
	}
}

// TestGaleraBarrierWaitsForOtherNodes: a statement on the harness's tables
// still running on node 2 (an orphan of a call its client gave up on) holds
// the barrier's wait, although node 1's processlist, where the harness
// runs, does not show it. Before the wait asked the other nodes, such an
// orphan acquire committed after the barrier had read the binary log and
// the next window reported it as a "harness barrier" violation.
func TestGaleraBarrierWaitsForOtherNodes(t *testing.T) {
	nodes := testdb.GaleraDSNs()
	if len(nodes) < 2 {
		t.Skip("SKIP galera barrier: set FENCE_TEST_GALERA to the node DSNs of a Galera cluster (clusters/galera/galera.sh)")
	}
	reachable(t, "galera", "FENCE_TEST_GALERA", nodes[0])
	ctx := context.Background()
	prefix := testdb.Prefix()
	h := &harness{sc: newSchema(fence.MySQL, prefix)}
	var err error
	if h.admin, err = fencedsn.Open(ctx, nodes[0], fence.WithPrefix(prefix)); err != nil {
		t.Fatal(err)
	}
	defer h.admin.Close()
	n2, err := fencedsn.Open(ctx, nodes[1], fence.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	h.nodes = []*fence.Store{n2}
	// The orphan: a statement naming the prefix, as every torture statement
	// does, running on node 2 until the test kills it.
	c, err := n2.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var id int64
	if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	kill := func() error {
		_, err := n2.DB().ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(id, 10))
		return err
	}
	defer func() { _ = kill() }() // before c.Close, which waits for the statement
	orphanDone := make(chan struct{})
	go func() {
		defer close(orphanDone)
		_ = c.QueryRowContext(ctx, "SELECT SLEEP(60) /* "+prefix+" */").Scan(new(int))
	}()
	for { // until node 2 shows it running
		var n int
		if err := n2.DB().QueryRowContext(ctx, h.sc.activeSQL(), prefix).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	waited := make(chan error, 1)
	go func() { waited <- h.waitInFlight(ctx) }()
	select {
	case err := <-waited:
		t.Fatalf("the barrier's wait returned (%v) while a statement on node 2 was still running", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	<-orphanDone
}
