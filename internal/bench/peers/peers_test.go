package peers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
)

// quick is a configuration that checks that everything runs, not how fast.
func quick() Config {
	var c Config
	c.Bench.Rounds, c.Bench.Budget, c.Bench.MinOps = 1, 10*time.Millisecond, 3
	c.Contended = 100 * time.Millisecond
	c.Workers = 4
	c.Leases = []int{1, 20}
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
