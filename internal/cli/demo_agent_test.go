package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fence demo agent runs the fencemcp module's fence-demo-agent (the fence
// command links no MCP SDK): missing, it says how to install it (127);
// present, it gets --dsn only when the user named one, and its failure is
// fence's failure. fencemcp/cmd/fence-demo-agent's TestFenceDemoAgent runs
// the real one through a built fence.
func TestDemoAgentRunsTheFencemcpCommand(t *testing.T) {
	dir := t.TempDir()
	env := []string{"PATH=" + dir, "FENCE_DSN=sqlite:" + filepath.Join(dir, "not-for-the-demo.db")}
	code, _, errs := mainIn(t, env, "", "demo", "agent")
	if code != ExitNotFound || !strings.Contains(errs, "fence-demo-agent is not installed") || !strings.Contains(errs, "go install github.com/fencekit/fence/fencemcp/cmd/fence-demo-agent@latest") {
		t.Fatalf("without the command: exit %d, stderr %q", code, errs)
	}
	// A stand-in on $PATH that prints its arguments and exits with $DEMO_EXIT.
	script := "#!/bin/sh\necho \"args:$*\"\nexit ${DEMO_EXIT:-0}\n"
	if err := os.WriteFile(filepath.Join(dir, "fence-demo-agent"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(env, "PATH="+dir+":/usr/bin:/bin")
	if code, out, errs := mainIn(t, env, "", "demo", "agent"); code != 0 || out != "args:\n" {
		t.Fatalf("demo agent: exit %d, stdout %q, stderr %q (FENCE_DSN must not reach the demo)", code, out, errs)
	}
	dsn := "postgres://postgres@127.0.0.1:5432/demo?sslmode=disable"
	if code, out, errs := mainIn(t, env, "", "--dsn", dsn, "demo", "agent"); code != 0 || out != "args:--dsn "+dsn+"\n" {
		t.Fatalf("demo agent --dsn: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = mainIn(t, append(env, "DEMO_EXIT=1"), "", "demo", "agent")
	if code != ExitFailure || !strings.Contains(errs, "exited with status 1: the story did not end as it must") {
		t.Fatalf("a failing demo: exit %d, stderr %q", code, errs)
	}
	if code, _, _ := mainIn(t, env, "", "demo", "agent", "extra"); code != ExitUsage {
		t.Fatalf("demo agent extra: exit %d, want %d", code, ExitUsage)
	}
}
