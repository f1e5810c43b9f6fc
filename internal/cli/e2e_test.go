package cli

// End-to-end tests: build the fence binary once and run it as a user would,
// against SQLite, PostgreSQL and MariaDB.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/testdb"
)

// fenceBin is the binary built by TestMain.
var fenceBin string

func TestMain(m *testing.M) {
	// In-process 'fence run' (TestMainInProcess) starts this test binary
	// as its command's shim.
	if len(os.Args) > 1 && os.Args[1] == ShimCommand {
		os.Exit(Shim(os.Args[2:]))
	}
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fence-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	fenceBin = filepath.Join(dir, "fence")
	build := exec.Command(goBin, "build", "-o", fenceBin, "github.com/fencekit/fence/cmd/fence")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building fence: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// backend is one database the end-to-end tests run against, with a table
// prefix of its own.
type backend struct {
	name   string
	dsn    string
	prefix string
	dir    string   // a scratch directory, also the working directory
	extra  []string // more environment for the fence processes
}

var (
	reachOnce sync.Map // dsn -> *reach
)

type reach struct {
	once sync.Once
	err  error
}

// reachable opens dsn once per test binary to see whether its server is up.
func reachable(dsn string) error {
	v, _ := reachOnce.LoadOrStore(dsn, &reach{})
	r := v.(*reach)
	r.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := fencedsn.Open(ctx, dsn)
		if err == nil {
			s.Close()
		}
		r.err = err
	})
	return r.err
}

// eachBackend runs f as parallel subtests on SQLite, PostgreSQL and MariaDB
// (skipped when unreachable, unless FENCE_REQUIRE_DBS=1), each on freshly
// migrated tables. The PostgreSQL and MariaDB runs need FENCE_LONG=1
// (.ci/run sets it): these tests start the fence binary and its process
// trees, whose behaviour the database does not change, and each takes
// seconds; the library's own suites cover every database by default.
func eachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Helper()
	for _, c := range []struct{ name, dsn, env string }{
		{"sqlite", "", ""},
		{"postgres", testdb.PostgresDSN(), "FENCE_TEST_POSTGRES"},
		{"mysql", testdb.MySQLDSN(), "FENCE_TEST_MYSQL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.name != "sqlite" {
				testdb.Long(t)
			}
			b := &backend{name: c.name, dsn: c.dsn, prefix: testdb.Prefix(), dir: t.TempDir()}
			if c.name == "sqlite" {
				b.dsn = "sqlite:" + filepath.Join(b.dir, "fence.db")
			} else if err := reachable(c.dsn); err != nil {
				testdb.Unreachable(t, c.name, c.env, err)
			}
			b.migrate(t)
			f(t, b)
		})
	}
}

func sqliteOnly(t *testing.T) *backend {
	dir := t.TempDir()
	b := &backend{name: "sqlite", dsn: "sqlite:" + filepath.Join(dir, "fence.db"), prefix: fence.DefaultPrefix, dir: dir}
	b.migrate(t)
	return b
}

func (b *backend) migrate(t *testing.T) {
	t.Helper()
	r := b.fence(t, "migrate")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "schema version ") {
		t.Fatalf("fence migrate: %v", r)
	}
	if b.name == "sqlite" {
		return
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := fencedsn.Open(ctx, b.dsn, fence.WithPrefix(b.prefix))
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer s.Close()
		if err := s.DropTables(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// env is the environment of a fence process: ours without FENCE_*, and the
// backend's DSN and prefix as FENCE_DSN and FENCE_PREFIX.
func (b *backend) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCE_") && !strings.HasPrefix(kv, "NO_COLOR=") {
			env = append(env, kv)
		}
	}
	env = append(env, b.extra...)
	return append(env, "FENCE_DSN="+b.dsn, "FENCE_PREFIX="+b.prefix)
}

type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\n--- stdout:\n%s--- stderr:\n%s", r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
}

// proc is a fence process started in the background.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	out   bytes.Buffer
	errb  syncBuffer
	start time.Time
	done  chan struct{}
	res   result
}

// start starts fence with args in the backend's directory and environment.
// The process is stopped at the end of the test if it is still running.
func (b *backend) start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(fenceBin, args...), done: make(chan struct{})}
	p.cmd.Dir = b.dir
	p.cmd.Env = b.env()
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errb
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.res = result{code: p.cmd.ProcessState.ExitCode(), stdout: p.out.String(), stderr: p.errb.String(), elapsed: time.Since(p.start)}
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.res.code = -1
			p.res.stderr += "\n(wait: " + err.Error() + ")"
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		// Resume it if a test paused it, then let it stop its command.
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// syncBuffer is a bytes.Buffer that may be read while the process writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitStderr waits until the process has written want to stderr.
func (p *proc) waitStderr(want string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.errb.String(), want) {
		if time.Now().After(deadline) {
			p.t.Fatalf("fence did not write %q to stderr within %v; stderr:\n%s", want, timeout, p.errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wait waits for the process to exit, failing the test after timeout.
func (p *proc) wait(timeout time.Duration) result {
	p.t.Helper()
	select {
	case <-p.done:
		return p.res
	case <-time.After(timeout):
		p.t.Fatalf("fence %s: still running after %v", strings.Join(p.cmd.Args[1:], " "), timeout)
		return result{}
	}
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// fence runs fence with args to completion (at most a minute).
func (b *backend) fence(t *testing.T, args ...string) result {
	t.Helper()
	return b.start(t, args...).wait(time.Minute)
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *backend) runsJSON(t *testing.T, args ...string) []runJSON {
	t.Helper()
	r := b.fence(t, append([]string{"runs", "--json", "--show-tokens"}, args...)...)
	if r.code != 0 {
		t.Fatalf("fence runs --json: %v", r)
	}
	var out []runJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("fence runs --json: %v\n%s", err, r.stdout)
	}
	return out
}

func (b *backend) leasesJSON(t *testing.T) []leaseJSON {
	t.Helper()
	r := b.fence(t, "leases", "--json", "--show-tokens")
	if r.code != 0 {
		t.Fatalf("fence leases --json: %v", r)
	}
	var out []leaseJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("fence leases --json: %v\n%s", err, r.stdout)
	}
	return out
}

func (b *backend) lease(t *testing.T, name string) leaseJSON {
	t.Helper()
	for _, l := range b.leasesJSON(t) {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no lease %q in fence leases --json", name)
	return leaseJSON{}
}

// oneErrorLine checks that stderr is exactly one line with a reason and a hint.
func oneErrorLine(t *testing.T, r result, want string) {
	t.Helper()
	line := strings.TrimSuffix(r.stderr, "\n")
	if strings.Contains(line, "\n") || line == "" {
		t.Errorf("stderr is not one line:\n%s", r.stderr)
	}
	if !strings.Contains(line, want) {
		t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
	}
	if !strings.Contains(line, "; hint: ") {
		t.Errorf("stderr has no hint:\n%s", r.stderr)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
