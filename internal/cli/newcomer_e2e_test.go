package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/testdb"
)

// A newcomer's path, as README.md writes it, is one test: from the clone,
// the demo, then the first fenced job on SQLite, then the same job on
// PostgreSQL. Every command line of
// the README's ```sh blocks runs as written, in order, in a scratch
// directory; only what the test cannot do as a reader would is replaced:
// "go run ./cmd/fence" and "go run ./examples/firstjob" are binaries built
// from this tree, the PostgreSQL URL is the test server's (in a schema of
// its own), and "go get", "git clone" and "go test ./..." (this test's own
// run) are left out.
func TestNewcomerPath(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	lines := readmeShLines(t, filepath.Join("..", "..", "README.md"))
	dir := t.TempDir()
	firstjob := filepath.Join(dir, "firstjob-bin")
	build := exec.Command("go", "build", "-o", firstjob, "github.com/fencekit/fence/examples/firstjob")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/firstjob: %v\n%s", err, out)
	}
	pgDSN := newcomerPostgres(t)
	var ran, jobs int
	var fences []string
	fenceRE := regexp.MustCompile(`nightly-report: completed \(fence (\d+)\)`)
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "go get "), strings.HasPrefix(line, "git clone "), line == "go test ./...":
			continue
		}
		cmdline := strings.Replace(line, "go run ./cmd/fence ", fenceBin+" ", 1)
		cmdline = strings.Replace(cmdline, "go run ./examples/firstjob", firstjob, 1)
		if strings.HasPrefix(cmdline, "DATABASE_URL=") {
			if pgDSN == "" {
				continue // skipped by newcomerPostgres, with the reason
			}
			i := strings.Index(cmdline, " ")
			cmdline = "DATABASE_URL='" + pgDSN + "'" + cmdline[i:]
		}
		if cmdline == line {
			t.Fatalf("README line %q is not one the newcomer's path knows how to run; teach this test", line)
		}
		cmd := exec.Command("sh", "-c", cmdline)
		cmd.Dir = dir
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "FENCE_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("$ %s\n%v\n%s", line, err, out)
		}
		t.Logf("$ %s\n%s", line, out)
		ran++
		if strings.Contains(line, "examples/firstjob") {
			jobs++
			m := fenceRE.FindStringSubmatch(string(out))
			if m == nil {
				t.Fatalf("$ %s\nprinted %q, want \"nightly-report: completed (fence N)\"", line, out)
			}
			fences = append(fences, m[1])
		}
	}
	if ran < 2 || jobs < 1 {
		t.Fatalf("ran %d README lines, %d of them the first job: the README lost its path (%q)", ran, jobs, lines)
	}
	// The SQLite job ran in dir: the file the README names is there.
	if _, err := os.Stat(filepath.Join(dir, "fence.db")); err != nil {
		t.Fatalf("the first job's SQLite file: %v", err)
	}
	t.Logf("fences: %v", fences)
}

// newcomerPostgres returns a DSN of the test PostgreSQL server whose
// search_path is a fresh schema (the job creates its table "reports"), or
// "" when the server is unreachable (an error under FENCE_REQUIRE_DBS=1).
func newcomerPostgres(t *testing.T) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := testdb.PostgresDSN()
	admin, err := fencedsn.Open(ctx, base)
	if err != nil {
		testdb.Unreachable(t, "postgres", "FENCE_TEST_POSTGRES", err)
		return ""
	}
	t.Cleanup(func() { admin.Close() })
	schema := strings.TrimSuffix(testdb.Prefix(), "_")
	if _, err := admin.DB().ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.DB().ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + schema
}

// readmeShLines returns the command lines of path's ```sh blocks, comments
// removed, in order.
func readmeShLines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inSh := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "```sh"):
			inSh = true
			continue
		case strings.HasPrefix(l, "```"):
			inSh = false
			continue
		}
		if !inSh {
			continue
		}
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
