package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence/fencemcp/example"
)

// TestFenceDemoAgent runs the command as a user does: fence demo agent,
// with the fence command of the core module (built from this checkout) and
// this command next to it. The output must show the thawed agent refused
// at every hop and each effect landed once, and the exit status must be 0.
func TestFenceDemoAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two commands")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build fence with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := t.TempDir()
	root, err := filepath.Abs("../../..") // the core module, which holds cmd/fence
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct{ dir, pkg string }{{root, "./cmd/fence"}, {".", "."}} {
		c := exec.CommandContext(ctx, goBin, "build", "-o", bin+string(filepath.Separator), b.pkg)
		c.Dir = b.dir
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("go build %s in %s: %v\n%s", b.pkg, b.dir, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "fence-demo-agent")); err != nil {
		t.Fatal(err)
	}
	c := exec.CommandContext(ctx, filepath.Join(bin, "fence"), "demo", "agent")
	c.Env = append(os.Environ(), "PATH=/usr/bin:/bin", "FENCE_DEMO_AGENT=")
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		t.Fatalf("fence demo agent: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	s := out.String()
	for _, hop := range example.Hops {
		if !strings.Contains(s, "A refused at "+hop+":") {
			t.Errorf("no refusal at %s in the timeline", hop)
		}
	}
	for _, want := range []string{
		"worker A freezes in the middle of its charge call",
		"worker B resumes the task at epoch",
		"  MCP server       REFUSED",
		"  tool's DB write  REFUSED",
		"  downstream HTTP  REFUSED     412 Precondition Failed",
		"OK: the zombie agent was refused at every hop; every effect landed exactly once.",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(s, "NOT REFUSED") || strings.Contains(s, "FAILED") {
		t.Error("the verdict reports a hop that let the thawed agent through")
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", s, errb.String())
	}
}

// TestRunOnServerDatabases plays the story through run with --dsn on the
// server databases the environment names (FENCE_TEST_POSTGRES,
// FENCE_TEST_MYSQL): its status is 0 only if Check passed.
func TestRunOnServerDatabases(t *testing.T) {
	for _, env := range []string{"FENCE_TEST_POSTGRES", "FENCE_TEST_MYSQL"} {
		dsn := os.Getenv(env)
		if dsn == "" {
			if os.Getenv("FENCE_REQUIRE_DBS") == "1" {
				t.Errorf("%s is not set and FENCE_REQUIRE_DBS=1", env)
			}
			continue
		}
		t.Run(env, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run([]string{"--dsn", dsn}, &out, &errb); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
			}
			if !strings.Contains(out.String(), "OK: the zombie agent was refused at every hop") {
				t.Fatalf("no OK verdict:\n%s", out.String())
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"extra"}, &out, &errb); code != 2 {
		t.Errorf("an extra argument: exit %d, want 2 (%s)", code, errb.String())
	}
}
