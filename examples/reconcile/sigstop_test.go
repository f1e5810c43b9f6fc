//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/sqlite"
)

// TestSIGSTOP is the story with a real pause. Worker A, a separate process
// running the reconciliation under fence.Run, is frozen with SIGSTOP after
// its scan: its job and its renewals stop together, as in a GC pause or a VM
// freeze, and its lease lapses. Worker B runs to completion in another
// process. A is continued with SIGCONT and carries on with its stale scan,
// heedless of its cancelled context, so only the fence can stop it: it must
// exit lost or rejected, say that it committed nothing, and leave no trace in
// the tables.
func TestSIGSTOP(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	eachDB(t, func(t *testing.T, e env) {
		ctx := ctxT(t)
		s := e.open(t)
		r := newReconciler(s)
		if err := r.seed(ctx, demoItems); err != nil {
			t.Fatal(err)
		}

		a := startWorker(t, bin, e, "-name", "A", "-ttl", "1500ms", "-work", "5s", "-heedless")
		var fenceA, runA int64
		a.scanLine(t, `A: acquired admin:reconciliation fence (\d+), run (\d+)`, &fenceA, &runA)
		waitFor(t, "A's run in the ledger", func() (bool, error) {
			rs, err := s.Runs(ctx, fence.RunFilter{Lease: leaseName, Status: fence.RunRunning})
			return len(rs) == 1 && rs[0].ID == runA && rs[0].Fence == fenceA, err
		})
		a.scanLine(t, `A: scanned: (\d+) to fix`, new(int64))

		stop(t, a, writeLockProbe(t, e))
		t.Logf("A (pid %d) stopped after its scan, holding fence %d", a.cmd.Process.Pid, fenceA)
		if err := r.expect(ctx, 3, "ivan"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "A's lease to lapse by the database clock", func() (bool, error) {
			li, err := s.Get(ctx, leaseName)
			return err == nil && li.State != fence.StateHeld, err
		})

		bctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		out, err := exec.CommandContext(bctx, bin, "worker", "-dsn", e.dsn, "-prefix", e.prefix, "-name", "B", "-ttl", "10s", "-wait").CombinedOutput()
		if err != nil {
			t.Fatalf("worker B: %v\n%s", err, out)
		}
		var fenceB, runB int64
		m := regexp.MustCompile(`B: completed: fence (\d+), run (\d+)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("worker B did not report completion:\n%s", out)
		}
		fenceB, _ = strconv.ParseInt(string(m[1]), 10, 64)
		runB, _ = strconv.ParseInt(string(m[2]), 10, 64)
		if fenceB <= fenceA {
			t.Errorf("B's fence %d, want above A's %d", fenceB, fenceA)
		}

		if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		code := a.wait(t, 60*time.Second)
		got := a.output()
		if code != exitLost && code != exitRejected {
			t.Fatalf("A exited %d, want %d (lost) or %d (rejected):\n%s", code, exitLost, exitRejected, got)
		}
		for _, want := range []string{
			fmt.Sprintf("lease %q fence %d superseded by fence %d; nothing committed", leaseName, fenceA, fenceB),
			// A's heedless job did try to write; the database refused it.
			"write refused",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("A's output lacks %q:\n%s", want, got)
			}
		}
		t.Logf("A exited %d:\n%s", code, got)
		checkOnlyB(t, r, runA, runB, fenceB)

		// Whoever noticed first (A's keeper: lost; its completion:
		// rejected), the ledger ends A's run when A stopped, after B's run
		// had started: the operations page shows the overlap.
		ra, err := s.GetRun(ctx, runA)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := s.GetRun(ctx, runB)
		if err != nil {
			t.Fatal(err)
		}
		if ra.Status != fence.RunAbandoned || !ra.FinishedAt.After(rb.StartedAt) ||
			!strings.Contains(ra.Error, "stopped late") && !strings.Contains(ra.Error, "completion refused") {
			t.Errorf("A's run: %s, ended %v, error %q; want abandoned, ending after B's run started (%v), saying how", ra.Status, ra.FinishedAt, ra.Error, rb.StartedAt)
		}
	})
}

// buildWorker builds the command once for the test, with the race detector
// if the test has it (the build then reuses the test's compiled packages,
// and the worker's runner is checked for races too).
func buildWorker(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build the worker: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "reconcile")
	args := []string{"build", "-o", bin}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goBin, append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// proc is a worker process whose output is collected as it runs.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func startWorker(t *testing.T, bin string, e env, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"worker", "-dsn", e.dsn, "-prefix", e.prefix}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	// Registered after eachDB's cleanup, so it runs first: a frozen worker
	// must be gone before its tables are dropped. SIGKILL ends a stopped
	// process too.
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
			t.Logf("killed worker; its output:\n%s", p.output())
		}
	})
	return p
}

// scanLine waits for a line matching re and parses its groups into dst.
func (p *proc) scanLine(t *testing.T, re string, dst ...*int64) {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	waitFor(t, fmt.Sprintf("worker output %q", re), func() (bool, error) {
		m = rx.FindStringSubmatch(p.output())
		select {
		case <-p.done:
			if m == nil {
				return false, fmt.Errorf("worker exited %d:\n%s", p.cmd.ProcessState.ExitCode(), p.output())
			}
		default:
		}
		return m != nil, nil
	})
	for i, d := range dst {
		*d, _ = strconv.ParseInt(m[i+1], 10, 64)
	}
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("worker still running after %v:\n%s", timeout, p.output())
		return -1
	}
}

// stop freezes p with SIGSTOP. On SQLite the writer's lock is in the worker
// process itself, so a worker frozen inside a transaction (a renewal, every
// TTL/3) would block every other writer until it is continued: fencing keeps
// a stale worker from committing, it cannot make a frozen lock holder let
// go. stop therefore retries until the worker is frozen outside one; probe
// says whether the write lock is free. On PostgreSQL and MySQL each of the
// worker's statements commits on the server, and probe is nil.
func stop(t *testing.T, p *proc, probe func() error) {
	t.Helper()
	pid := p.cmd.Process.Pid
	for attempt := 1; ; attempt++ {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitStopped(t, pid)
		if probe == nil {
			return
		}
		err := probe()
		if err == nil {
			return
		}
		if attempt == 50 {
			t.Fatalf("worker holds the SQLite write lock whenever it is stopped: %v", err)
		}
		t.Logf("stopped inside a write transaction (%v); continuing and stopping again", err)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(15 * time.Millisecond)
	}
}

// waitStopped waits until the kernel reports pid stopped: kill returns
// before the signal has taken effect. Without /proc it waits a moment.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		time.Sleep(200 * time.Millisecond)
		return
	}
	waitFor(t, "the worker to stop", func() (bool, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false, err
		}
		// pid (comm) STATE …; comm may contain spaces and parentheses.
		rest := string(b[bytes.LastIndexByte(b, ')')+1:])
		f := strings.Fields(rest)
		return len(f) > 0 && (f[0] == "T" || f[0] == "t"), nil
	})
}

// writeLockProbe returns, on SQLite, a check that another process could
// take the write lock now; nil elsewhere.
func writeLockProbe(t *testing.T, e env) func() error {
	t.Helper()
	if e.b.name != "sqlite" {
		return nil
	}
	d, err := fencedsn.Parse(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 200"); err != nil {
			return err
		}
		tx, err := conn.BeginTx(ctx, nil) // BEGIN IMMEDIATE: takes the write lock or fails busy
		if err != nil {
			return err
		}
		return tx.Rollback()
	}
}

// waitFor polls cond until it is true, fails on its error, and gives up
// after a deadline long enough for a loaded machine.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
