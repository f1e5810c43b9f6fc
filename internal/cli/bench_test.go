package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fence bench --quick on SQLite prints the JSON list the issue specifies;
// it checks the wiring, not the numbers.
func TestBenchQuickJSON(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "bench.db")
	code, out, errs := mainIn(t, nil, "", "bench", "--dsn", dsn, "--quick", "--json")
	if code != 0 {
		t.Fatalf("bench: %d\n%s", code, errs)
	}
	var rs []map[string]any
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("not a JSON list: %v\n%s", err, out)
	}
	byName := map[string]map[string]any{}
	for _, r := range rs {
		byName[r["name"].(string)] = r
	}
	for _, name := range []string{"floor_update", "select_1", "acquire", "renew", "release", "is_held", "acquire_held", "takeover", "fenced_write", "fenced_tx", "floor_update_wide", "fenced_write_sql", "tx_pk_read", "renew_cancel_ctx"} {
		r, ok := byName[name]
		if !ok {
			t.Errorf("no %s in %s", name, out)
			continue
		}
		for _, k := range []string{"name", "ns_per_op", "round_trips_per_op", "baseline", "ratio_to_baseline"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%s has no %s", name, k)
			}
		}
	}
	if r := byName["load_average"]; r == nil || (r["metrics"] == nil && r["skipped"] == nil) {
		t.Errorf("no load average: %v", r)
	}
	if r := byName["acquire"]; r != nil && (r["baseline"] != "floor_update" || r["ratio_to_baseline"].(float64) <= 0) {
		t.Errorf("acquire: %v", r)
	}
}

func TestBenchRejectsArguments(t *testing.T) {
	if code, _, _ := mainIn(t, nil, "", "bench", "extra"); code != ExitUsage {
		t.Errorf("bench extra: exit %d, want %d", code, ExitUsage)
	}
}

// --peers runs fence-bench-peers; when it is missing the error says how to
// build it instead of failing obscurely.
func TestBenchPeersMissingCommand(t *testing.T) {
	t.Setenv("FENCE_BENCH_PEERS", filepath.Join(t.TempDir(), "nothing-here"))
	code, _, errs := mainIn(t, nil, "", "bench", "--dsn", "sqlite:"+filepath.Join(t.TempDir(), "b.db"), "--peers")
	if code != ExitNotFound || !strings.Contains(errs, "go build") {
		t.Errorf("bench --peers without the command: exit %d, want %d, and a hint to build it:\n%s", code, ExitNotFound, errs)
	}
}

func TestBenchRedisNeedsPeers(t *testing.T) {
	if code, _, _ := mainIn(t, nil, "", "bench", "--dsn", "sqlite:"+filepath.Join(t.TempDir(), "b.db"), "--redis", "127.0.0.1:6379"); code != ExitUsage {
		t.Errorf("bench --redis without --peers: exit %d, want %d", code, ExitUsage)
	}
}

// The contended scenario's flags reach fence-bench-peers as given, and are
// refused without --peers or below one round.
func TestBenchContendedRounds(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "b.db")
	if code, _, _ := mainIn(t, nil, "", "bench", "--dsn", dsn, "--contended-rounds", "2"); code != ExitUsage {
		t.Errorf("bench --contended-rounds without --peers: exit %d, want %d", code, ExitUsage)
	}
	if code, _, _ := mainIn(t, nil, "", "bench", "--dsn", dsn, "--peers", "--contended-rounds", "0"); code != ExitUsage {
		t.Errorf("bench --peers --contended-rounds 0: exit %d, want %d", code, ExitUsage)
	}
	fake := filepath.Join(t.TempDir(), "fence-bench-peers")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FENCE_BENCH_PEERS", fake)
	code, out, errs := mainIn(t, nil, "", "bench", "--dsn", dsn, "--peers", "--contended-rounds", "5", "--contended", "1s", "--json")
	if code != 0 || strings.TrimSpace(out) != "--contended=1s --contended-rounds=5 --json" {
		t.Errorf("bench --peers: exit %d, fence-bench-peers got %q (stderr %q)", code, out, errs)
	}
}
