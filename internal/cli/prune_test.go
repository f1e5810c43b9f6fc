package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunsPrune(t *testing.T) {
	env := []string{"FENCE_DSN=sqlite:" + filepath.Join(t.TempDir(), "f.db"), "PATH=/usr/bin:/bin"}
	if code, _, errs := mainIn(t, env, "", "migrate"); code != 0 {
		t.Fatalf("migrate: %d %s", code, errs)
	}
	for i := 0; i < 2; i++ {
		if code, _, errs := mainIn(t, env, "", "run", "--lease", "prune-me", "--", "true"); code != 0 {
			t.Fatalf("run: %d %s", code, errs)
		}
	}
	code, out, errs := mainIn(t, env, "", "runs", "prune", "--older-than", "1h")
	if code != 0 || out != "deleted 0 finished run(s) older than 1h0m0s\n" {
		t.Fatalf("prune --older-than 1h: %d %q %q", code, out, errs)
	}
	// Runs finished at least a millisecond ago by the database clock go;
	// the database's millisecond may not have turned yet, so ask until it has.
	deleted := 0
	for deadline := time.Now().Add(10 * time.Second); deleted < 2 && time.Now().Before(deadline); {
		code, out, errs = mainIn(t, env, "", "--json", "runs", "prune", "--older-than", "1ms")
		var got struct{ Deleted int }
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("prune --json: %d %q %q", code, out, errs)
		}
		deleted += got.Deleted
		if deleted < 2 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if deleted != 2 {
		t.Fatalf("deleted %d runs, want 2", deleted)
	}
	if code, out, _ := mainIn(t, env, "", "--json", "runs"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("runs after prune: %d %s", code, out)
	}
	for _, args := range [][]string{
		{"runs", "prune"},
		{"runs", "prune", "--older-than", "0s"},
		{"runs", "prune", "--older-than", "-1h"},
		{"runs", "prune", "--older-than", "1h", "--lease", "bad\x01name"},
	} {
		if code, _, errs := mainIn(t, env, "", args...); code != ExitUsage || errs == "" {
			t.Errorf("%q: exit %d %q, want usage error", args, code, errs)
		}
	}
}
