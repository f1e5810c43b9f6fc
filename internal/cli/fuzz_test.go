package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzFlags feeds hostile flag values to the commands that take them. Every
// call must end with a known exit status, never a panic, and an error must be
// one line on stderr. The command run is always `true`, so nothing a fuzzed
// value says can be executed.
func FuzzFlags(f *testing.F) {
	for _, seed := range [][4]string{
		{"runs", "nightly", "succeeded", "5"},
		{"runs", "'; DROP TABLE fence_runs; --", "bogus", "-1"},
		{"run", "job", "30s", "0"},
		{"run", "a\x00b", "-5s", "1h"},
		{"run", "job", "1ns", "9999999h"},
		{"release", "x\ny", "", ""},
		{"leases", "", "", ""},
		{"run", strings.Repeat("n", 300), "100ms", "abc"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	dir, err := os.MkdirTemp("", "fence-fuzz-") // t.TempDir names carry '#'
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	dsn := ""
	f.Fuzz(func(t *testing.T, cmd, a, b, c string) {
		if dsn == "" {
			dsn = "sqlite:" + filepath.Join(dir, "fuzz.db")
			var out, errb bytes.Buffer
			if code := Main(context.Background(), []string{"--dsn", dsn, "migrate"}, nil, &out, &errb, nil); code != 0 {
				t.Fatalf("migrate: %d %s", code, errb.String())
			}
		}
		var args []string
		switch cmd {
		case "runs":
			args = []string{"runs", "--lease", a, "--status", b, "--limit", c}
		case "run":
			args = []string{"run", "--lease", a, "--ttl", b, "--wait", c, "--grace", "0s", "--", "true"}
		case "release":
			args = []string{"release", a, "--force", "--yes"}
		default:
			args = []string{"leases", "--prefix", a}
		}
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"--dsn", dsn}, args...), strings.NewReader(""), &out, &errb, nil)
		switch code {
		case 0, ExitFailure, ExitUsage, ExitNotAcquired, ExitLost:
		default:
			t.Fatalf("%q: exit %d\n%s", args, code, errb.String())
		}
		if code != 0 {
			msg := strings.TrimRight(errb.String(), "\n")
			if msg == "" || strings.Count(msg, "\n") > 0 {
				t.Fatalf("%q: exit %d with stderr %q: want one line", args, code, msg)
			}
		}
	})
}
