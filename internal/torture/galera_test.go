package torture

import (
	"context"
	"strings"
	"testing"
	"time"

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
