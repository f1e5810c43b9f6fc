package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

// fence run's part of the SIGSTOP story: the lease is taken over and the
// new owner's run starts (abandoning this run, with the new run's start as
// its end) while the command still runs; fence's renewal then finds the
// lease lost and stops the command. The ledger must keep when the stale
// run really ended, so the timeline shows it overlapping its successor.
// Before, the runner's mark changed nothing (the run was no longer
// running) and the stale run ended when its successor started.
func TestRunRecordsOverlapWithSuccessor(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) {
		started := filepath.Join(b.dir, "started")
		p := b.start(t, "run", "--lease", "overlap", "--ttl", "3s", "--grace", "1s", "--", "sh", "-c",
			"touch "+started+"; while :; do sleep 0.05; done")
		waitFile(t, started, 30*time.Second)
		s := openBackend(t, b)
		ctx := context.Background()
		if _, err := s.Revoke(ctx, "overlap"); err != nil {
			t.Fatal(err)
		}
		l, err := s.Acquire(ctx, "overlap", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		succ, err := s.StartRun(ctx, l.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := p.wait(time.Minute); r.code != ExitLost {
			t.Fatalf("after the takeover: want 76: %v", r)
		}
		runs, err := s.Runs(ctx, fence.RunFilter{Lease: "overlap"})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 2 || runs[0].ID != succ {
			t.Fatalf("runs %+v, want fence run's and its successor %d", runs, succ)
		}
		stale, next := runs[1], runs[0]
		if stale.Status != fence.RunAbandoned || !stale.FinishedAt.After(next.StartedAt) || !strings.Contains(stale.Error, "stopped late") {
			t.Errorf("fence run's run: %s, ended %v, error %q; want abandoned, ending after its successor started (%v), saying it stopped late",
				stale.Status, stale.FinishedAt, stale.Error, next.StartedAt)
		}
	})
}
