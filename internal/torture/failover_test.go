package torture

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/testdb"
)

// The failover fault's plumbing, without a cluster: on SQLite a "failover"
// command that only prints its lines. With --failover-lossy and a raise
// after each, the windows with a failover are left unchecked, RaiseFences
// revokes every lease behind the clients' backs, and the facts restart
// from the database at the barrier: the windows after it must check clean,
// which fails if the resync missed anything (the log's sequence, the
// latest generation, the write counters).
func TestFailoverFaultLossyResync(t *testing.T) {
	testdb.Long(t)
	cmd := "echo primary-lost; echo promoted; echo lost-wal-bytes 4242; echo rebuilt >&2"
	cfg := Config{DSN: "sqlite:" + filepath.Join(t.TempDir(), "torture.db"), Clients: 4, Leases: 3, Duration: 6 * time.Second,
		Window: time.Second, Faults: Faults{FaultPause: true, FaultCancel: true}, Seed: uint64(time.Now().UnixNano()), Out: t.TempDir(),
		FailoverCmd: cmd, FailoverLossy: true, RaiseAfterFailover: true}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r.WriteSummary(&b)
	t.Log("\n" + b.String())
	expectClean(t, r)
	n := r.FaultCount[FaultFailover]
	if n == 0 {
		t.Fatalf("no failover in %v (seed %d): the schedule never fired", cfg.Duration, r.Seed)
	}
	if r.Failover.UncheckedWindows != n || r.FaultCount["raise-fences"] != n {
		t.Errorf("%d failovers, %d unchecked windows, %d raises: want one of each per failover", n, r.Failover.UncheckedWindows, r.FaultCount["raise-fences"])
	}
	if len(r.Failover.LostWALBytes) != int(n) || r.Failover.LostWALBytes[0] != 4242 {
		t.Errorf("lost WAL %v, want 4242 per failover", r.Failover.LostWALBytes)
	}
	if len(r.Failover.Promotes) != int(n) {
		t.Errorf("%d promotion times for %d failovers", len(r.Failover.Promotes), n)
	}
	for _, want := range []string{"failover:    ", "failover pause", "WAL bytes the promoted standby never received: 4242", "fenced-write latency"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q", want)
		}
	}
}

// A command that fails, or never says when the primary was lost, is an
// error of the run (exit 2), never a clean result.
func TestFailoverCommandErrors(t *testing.T) {
	testdb.Long(t)
	for cmd, want := range map[string]string{
		"echo promoted":                   "no primary-lost line",
		"echo primary-lost; exit 3":       "failed",
		"echo primary-lost; echo nothing": "no promoted line",
	} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			// The first failover is due 1–3 s of fault ticks into the run and
			// only in a window's first half: 12 s leaves a loaded machine
			// room for it (4 s did not, once, under CI's race suite).
			cfg := Config{DSN: "sqlite:" + filepath.Join(t.TempDir(), "torture.db"), Clients: 2, Duration: 12 * time.Second,
				Window: time.Second, Seed: 1, FailoverCmd: cmd}
			r, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.ExitCode() != 2 || !strings.Contains(strings.Join(r.Errors, "\n"), want) {
				t.Errorf("command %q: exit %d, errors %q; want exit 2 and an error saying %q", cmd, r.ExitCode(), r.Errors, want)
			}
		})
	}
}

// Failovers fire only in a window's first half, and a due one waits for
// the next window rather than being dropped.
func TestFailoverScheduleFirstHalf(t *testing.T) {
	h := &harness{cfg: Config{FailoverCmd: "true", Window: 2 * time.Second}, faultRng: rand.New(rand.NewPCG(1, 2))}
	tick := 200 * time.Millisecond
	for range 50 {
		if h.failoverDue(tick, 1500*time.Millisecond) {
			t.Fatal("a failover fired in the second half of a window")
		}
	}
	if !h.failoverDue(0, 100*time.Millisecond) {
		t.Fatal("a failover due in the second half of a window did not fire at the start of the next")
	}
	if h.failoverDue(tick, 100*time.Millisecond) {
		t.Fatal("a second failover fired one tick after the first (want 3-6 s apart)")
	}
	if (&harness{cfg: Config{Window: time.Second}, faultRng: rand.New(rand.NewPCG(1, 2))}).failoverDue(time.Hour, 0) {
		t.Fatal("a failover fired without a command")
	}
}

func TestFailoverConfigRefused(t *testing.T) {
	for _, cfg := range []Config{
		{FailoverLossy: true},
		{FailoverCmd: "true", RaiseAfterFailover: true},
		{FailoverCmd: "true", Faults: Faults{FaultRestart: true}},
		{FailoverCmd: "true", Faults: Faults{FaultProxy: true}},
	} {
		cfg.DSN, cfg.Duration = "sqlite:"+filepath.Join(t.TempDir(), "t.db"), time.Second
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%+v: Run did not refuse it", cfg)
		}
	}
	if err := checkFailoverConfig(Config{FailoverCmd: "true", FailoverLossy: true, RaiseAfterFailover: true, Faults: Faults{FaultPause: true}}); err != nil {
		t.Errorf("a valid failover config refused: %v", err)
	}
}
