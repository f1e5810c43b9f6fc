package cli

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A password with #, ?, / and @ in it — the characters that split a URL —
// must never appear, whole or in part, in fence run's output, logs, the run
// ledger, metrics, the command's environment or fence's argv (with
// --dsn-file and $FENCE_DSN), on any database. PostgreSQL here trusts local
// connections, so the password is accepted and the run goes through;
// MariaDB's root has no password, so there the run fails to connect, and
// the error must not leak it either.
func TestRunPasswordNeverLeaks(t *testing.T) {
	// In a URL '/' and '@' in a password must be percent-encoded (pgx and
	// go-sql-driver split there); '#' and '?' need not be.
	const secret, encoded = "Xy7#S?u/m@er", "Xy7#S?u%2Fm%40er"
	fragments := []string{secret, encoded, "Xy7#", "#S?u", "u/m@", "m@er", "Xy7", "%2Fm%40"}
	leaks := func(s string) string {
		for _, f := range fragments {
			if strings.Contains(s, f) {
				return f
			}
		}
		return ""
	}
	eachBackend(t, func(t *testing.T, b *backend) {
		if b.name == "sqlite" {
			t.Skip("a SQLite DSN has no password")
		}
		u, err := url.Parse(b.dsn)
		if err != nil {
			t.Fatal(err)
		}
		user := u.User.Username()
		q := ""
		if u.RawQuery != "" {
			q = "?" + u.RawQuery
		}
		dsn := u.Scheme + "://" + user + ":" + encoded + "@" + u.Host + u.Path + q
		works := b.name == "postgres"

		// Unencoded, the DSN is refused, and the refusal must not echo any
		// part of the authority either.
		raw := u.Scheme + "://" + user + ":" + secret + "@" + u.Host + u.Path + q
		for _, args := range [][]string{{"--dsn", raw, "run", "--lease", "x", "--", "true"}, {"--dsn", raw, "migrate"}} {
			r := b.fence(t, args...)
			if r.code == 0 {
				t.Errorf("fence %s with an unencoded '/' and '@' in the password: %v", args[2], r)
			}
			if f := leaks(r.stdout + r.stderr); f != "" {
				t.Errorf("fence %s: output contains %q:\n%v", args[2], f, r)
			}
		}

		dsnFile := filepath.Join(b.dir, "dsn")
		if err := os.WriteFile(dsnFile, []byte(dsn+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		port := freePort(t)
		for _, c := range []struct {
			name string
			args []string
			env  []string
		}{
			{"--dsn", []string{"--dsn", dsn}, nil},
			{"--dsn-file", []string{"--dsn-file", dsnFile}, nil},
			{"FENCE_DSN", nil, []string{"FENCE_DSN=" + dsn}},
		} {
			t.Run(c.name, func(t *testing.T) {
				bb := *b
				bb.extra = c.env
				if c.env != nil {
					bb.dsn = dsn // b.env() puts FENCE_DSN last
				}
				envFile := filepath.Join(b.dir, "env-"+c.name)
				cmdlines := filepath.Join(b.dir, "cmdlines-"+c.name)
				started := filepath.Join(b.dir, "started-"+c.name)
				goOn := filepath.Join(b.dir, "go-on-"+c.name)
				script := `env > ` + envFile + `; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' ' > ` + cmdlines +
					`; touch ` + started + `; while ! test -e ` + goOn + `; do sleep 0.02; done`
				args := append(append([]string{"--log-level", "debug"}, c.args...),
					"run", "--lease", "secret", "--ttl", "5s", "--metrics-addr", port, "--", "sh", "-c", script)
				p := bb.start(t, args...)
				var metrics string
				if works {
					waitFile(t, started, 60*time.Second)
					metrics = get(t, "http://"+port+"/metrics")
				}
				if err := os.WriteFile(goOn, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				r := p.wait(time.Minute)
				if works && r.code != 0 {
					t.Fatalf("the run should have connected (trust authentication): %v", r)
				}
				if !works && r.code == 0 {
					t.Fatalf("the run should have failed to authenticate: %v", r)
				}
				if f := leaks(r.stdout + r.stderr); f != "" {
					t.Errorf("output contains %q:\n%v", f, r)
				}
				if c.name == "--dsn" && works && !strings.Contains(r.stderr, "fence run: warning: the password in --dsn") {
					t.Errorf("no warning about the password in --dsn: %v", r)
				}
				if c.name != "--dsn" && strings.Contains(r.stderr, "warning") {
					t.Errorf("a warning without a password in argv: %v", r)
				}
				if f := leaks(metrics); f != "" {
					t.Errorf("metrics contain %q", f)
				}
				if !works {
					return
				}
				env, _ := os.ReadFile(envFile)
				if f := leaks(string(env)); f != "" || strings.Contains(string(env), "FENCE_DSN=") {
					t.Errorf("the command's environment has FENCE_DSN or %q:\n%s", f, env)
				}
				cl, _ := os.ReadFile(cmdlines)
				if f := leaks(string(cl)); c.name != "--dsn" && f != "" {
					t.Errorf("a process's argv contains %q although the DSN was not given with --dsn", f)
				}
				for _, args := range [][]string{{"runs", "--json"}, {"runs"}, {"leases", "--json"}} {
					if r := bb.fence(t, append(c.args, args...)...); r.code != 0 || leaks(r.stdout+r.stderr) != "" {
						t.Errorf("fence %v: %v", args, r)
					}
				}
			})
		}
	})
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(t *testing.T, u string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(u)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", u, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
