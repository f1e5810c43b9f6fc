package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The fence command lines of README.md and cmd/fence/README.md, run as
// written on a SQLite database in a scratch directory, in the order the
// READMEs give them: each must exit 0. Only what a reader cannot copy is
// replaced: "go run ./cmd/fence" is the built binary on PATH, a crontab
// line loses its schedule, /etc/fence/dsn is a file in the directory, and
// ./report.sh is a script that exits 0.
//
// README.md and the guides of docs/guides are read as one path, README
// first: a reader comes to a guide from the README's table.
func TestReadmeCommandLines(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	guides, err := filepath.Glob(filepath.Join("..", "..", "docs", "guides", "*.md"))
	if err != nil || len(guides) == 0 {
		t.Fatalf("no guides in docs/guides: %v", err)
	}
	for _, files := range [][]string{
		append([]string{filepath.Join("..", "..", "README.md")}, guides...),
		{filepath.Join("..", "..", "cmd", "fence", "README.md")},
	} {
		f := filepath.Base(files[0])
		if len(files) == 1 {
			f = "cmd/fence/README.md"
		}
		t.Run(f, func(t *testing.T) {
			var lines []string
			for _, f := range files {
				lines = append(lines, readmeFenceLines(t, f)...)
			}
			if len(lines) < 5 {
				t.Fatalf("%s: found %d fence command lines; the extraction is broken: %q", f, len(lines), lines)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "report.sh"), []byte("#!/bin/sh\necho report done\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "dsn"), []byte("sqlite:fence.db\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "FENCE_") && !strings.HasPrefix(kv, "PATH=") {
					env = append(env, kv)
				}
			}
			env = append(env, "PATH="+filepath.Dir(fenceBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
			for _, line := range lines {
				line = strings.ReplaceAll(line, "/etc/fence/dsn", "dsn")
				cmd := exec.Command("sh", "-c", line)
				cmd.Dir, cmd.Env = dir, env
				start := time.Now()
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s\n%v after %v\n%s", line, err, time.Since(start).Round(time.Millisecond), out)
				}
				t.Logf("$ %s\n%s", line, out)
			}
		})
	}
}

var cronPrefix = regexp.MustCompile(`^(\S+\s+){5}\s*fence `)

// readmeFenceLines returns the fence command lines of path's ```sh blocks
// and indented blocks, with comments removed.
func readmeFenceLines(t *testing.T, path string) []string {
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
			if !strings.HasPrefix(l, "    ") {
				continue
			}
			l = strings.TrimPrefix(l, "    ")
		}
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		l = strings.TrimSpace(l)
		l = strings.Replace(l, "go run ./cmd/fence ", "fence ", 1)
		if m := cronPrefix.FindStringIndex(l); m != nil {
			l = "fence " + l[m[1]:]
		}
		if strings.HasPrefix(l, "fence ") {
			out = append(out, l)
		}
	}
	return out
}
