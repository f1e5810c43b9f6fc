package peers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/bench"
	"github.com/fencekit/fence/internal/testdb"
)

// quick is a configuration that checks that everything runs, not how fast.
func quick() Config {
	var c Config
	c.Bench.Rounds, c.Bench.Budget, c.Bench.MinOps = 1, 10*time.Millisecond, 3
	c.Contended = 100 * time.Millisecond
	c.Workers = 4
	c.Leases = []int{1, 20}
	c.ContendedRounds = 2
	// The Redis lock runs where a Redis answers (FENCE_BENCH_REDIS, default
	// the local one; CI has none) and is reported as skipped elsewhere.
	c.Redis = os.Getenv("FENCE_BENCH_REDIS")
	if c.Redis == "" {
		c.Redis = "127.0.0.1:6379"
	}
	return c
}

// TestRun runs every peer on each database the tests reach and checks the
// rows the issue asks for: each operation of each peer, its ratio to fence,
// durability, and the contended scenario.
func TestRun(t *testing.T) {
	dbs := []struct{ name, env, dsn string }{
		{"sqlite", "", "sqlite:" + filepath.Join(t.TempDir(), "peers.db")},
		{"postgres", "FENCE_TEST_POSTGRES", testdb.PostgresDSN()},
		{"mysql", "FENCE_TEST_MYSQL", testdb.MySQLDSN()},
	}
	for _, db := range dbs {
		t.Run(db.name, func(t *testing.T) {
			rows, err := Run(context.Background(), db.dsn, quick())
			if errors.Is(err, fence.ErrUnavailable) {
				testdb.Unreachable(t, db.name, db.env, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{Fence: true, "shedlock": true}
			switch db.name {
			case "postgres":
				want["river_logged"], want["river_unlogged"], want["pg_advisory"] = true, false, false
				want["fence_plain_update"] = true
			case "mysql":
				want["mysql_get_lock"], want["fence_plain_update"] = false, true
			}
			seen := map[string]int{}
			for _, r := range rows {
				if r.Name == "load_average" {
					continue
				}
				if d, ok := want[r.Peer]; ok && r.Durable != d {
					t.Errorf("%s %s: durable %v, want %v", r.Peer, r.Name, r.Durable, d)
				}
				if r.Skipped != "" {
					if r.Peer != "pglock" && r.Peer != "redis" && !(r.Name == Renew && (r.Peer == "pg_advisory" || r.Peer == "mysql_get_lock")) {
						t.Errorf("%s %s skipped: %s", r.Peer, r.Name, r.Skipped)
					}
					continue
				}
				seen[r.Peer+" "+r.Name]++
				switch r.Name {
				case AcquireRelease, Renew, Refused:
					if r.NsPerOp <= 0 || r.RoundTripsPerOp <= 0 || r.RatioToFence <= 0 {
						t.Errorf("%s %s: %+v", r.Peer, r.Name, r)
					}
				case Contended:
					// Refusals are likely on one lease but not certain (SQLite
					// serialises the writers), so only acquisitions are required.
					if r.AcquisitionsPerS <= 0 || r.RoundTripsPerOp <= 0 || r.Workers != 4 {
						t.Errorf("contended %s on %d: %+v", r.Peer, r.Leases, r)
					}
					if r.Rounds != 2 || len(r.AcquisitionsPerSRuns) != 2 || len(r.ThroughputToFenceRuns) != 2 {
						t.Errorf("contended %s on %d: want 2 rounds with a rate and a ratio each: %+v", r.Peer, r.Leases, r)
					}
					if r.Peer == Fence && (r.ThroughputToFence != 1 || r.ThroughputToFenceRuns[0] != 1) {
						t.Errorf("contended fence on %d: ratio to itself %v", r.Leases, r.ThroughputToFenceRuns)
					}
				default:
					t.Errorf("unexpected row %+v", r)
				}
			}
			for p := range want {
				for _, op := range []string{AcquireRelease, Refused, Contended} {
					if n := seen[p+" "+op]; op == Contended && n != 2 || op != Contended && n != 1 {
						t.Errorf("%s %s: %d rows", p, op, n)
					}
				}
			}
		})
	}
}

// TestMerge checks the medians of a scenario's rounds: each ratio is taken
// within its own round, so the median ratio is not the ratio of the median
// rates.
func TestMerge(t *testing.T) {
	rounds := []Row{
		{AcquisitionsPerS: 100, ThroughputToFence: 1.5, Seconds: 2, Ops: 10, RoundTripsPerOp: 2, RefusalP50Ns: 5, RefusalP99Ns: 50},
		{AcquisitionsPerS: 300, ThroughputToFence: 1.1, Seconds: 2, Ops: 30, RoundTripsPerOp: 1, RefusalP50Ns: 7, RefusalP99Ns: 70},
		{AcquisitionsPerS: 200, ThroughputToFence: 0.9, Seconds: 2, Ops: 20, RoundTripsPerOp: 1, RefusalP50Ns: 6, RefusalP99Ns: 90},
	}
	m := merge(rounds)
	if m.AcquisitionsPerS != 200 || m.ThroughputToFence != 1.1 || m.RefusalP50Ns != 6 || m.RefusalP99Ns != 70 {
		t.Errorf("medians: %+v", m)
	}
	if m.Rounds != 3 || m.Seconds != 6 || m.Ops != 60 || m.RoundTripsPerOp != 70.0/60 {
		t.Errorf("sums: %+v", m)
	}
	if !slices.Equal(m.AcquisitionsPerSRuns, []float64{100, 300, 200}) || !slices.Equal(m.ThroughputToFenceRuns, []float64{1.5, 1.1, 0.9}) {
		t.Errorf("runs in the order they ran: %v %v", m.AcquisitionsPerSRuns, m.ThroughputToFenceRuns)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of an even count: %v", got)
	}
	if got := median(nil); got != 0 {
		t.Errorf("median of none: %v", got)
	}
}

// TestShedLockRenewWrites: every ShedLock renew must change the row. A
// renew that sets lock_until to the value it already has writes nothing on
// SQLite (no page, no sync) and logs nothing on InnoDB, and the peer's
// renew then measures as a read (it did, at 0.1x fence's renew on SQLite,
// before the extension alternated).
func TestShedLockRenewWrites(t *testing.T) {
	ctx := context.Background()
	e, err := bench.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "renew.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	shared, err := newShedLockShared(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newShedLock(ctx, e, shared)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.tryLock(ctx, "renewed"); !ok || err != nil {
		t.Fatalf("lock: %v %v", ok, err)
	}
	read := e.DB.QueryRowContext
	var last int64
	for i := range 20 {
		if ok, err := c.renew(ctx, "renewed"); !ok || err != nil {
			t.Fatalf("renew %d: %v %v", i, ok, err)
		}
		var until int64
		if err := read(ctx, "SELECT lock_until FROM "+e.Table("shedlock")+" WHERE name = ?", "renewed").Scan(&until); err != nil {
			t.Fatal(err)
		}
		if until == last {
			t.Fatalf("renew %d left lock_until at %d: it wrote nothing", i, until)
		}
		last = until
	}
}
