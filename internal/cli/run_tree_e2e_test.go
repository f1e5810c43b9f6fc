//go:build linux

package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/ops"
)

// The supervisor's guarantee, end to end: nothing of fence run's command —
// whatever session or group a descendant moved to — is alive when the next
// holder gets the lease, whether fence run was killed, stopped (^Z or
// SIGSTOP) or lost the lease. Descendants are found by a marker in their
// environment, which they inherit from fence run.

// marked returns the live processes whose environment holds mark, except
// the pids in skip.
func marked(mark string, skip ...int) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || contains(skip, pid) {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, []byte("FENCE_TEST_MARK="+mark+"\x00")) {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return out
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// markedBackend is b whose fence processes (and so their commands) carry
// mark; leftovers are killed at the end of the test (the old fence run
// leaked them).
func markedBackend(t *testing.T, b *backend, mark string) *backend {
	t.Cleanup(func() {
		for _, p := range marked(mark) {
			pid, _ := strconv.Atoi(strings.SplitN(p, ":", 2)[0])
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	a := *b
	a.extra = append(append([]string(nil), b.extra...), "FENCE_TEST_MARK="+mark)
	return &a
}

// nextHolderFinds runs the next holder of lease with --wait: its command,
// started once the lease is granted, lists the processes that still carry
// mark. It returns them (without skip) and the fence the holder got.
func nextHolderFinds(t *testing.T, b *backend, lease, mark string, skip ...int) ([]string, string) {
	t.Helper()
	found := filepath.Join(b.dir, "found-"+mark)
	r := b.fence(t, "run", "--lease", lease, "--wait", "60s", "--", "sh", "-c",
		`grep -las "FENCE_TEST_MARK=`+mark+`" /proc/[0-9]*/environ > `+found+`; echo "$FENCE_TOKEN"`)
	if r.code != 0 {
		t.Fatalf("the next holder: %v", r)
	}
	data, _ := os.ReadFile(found)
	var alive []string
	for _, f := range strings.Fields(string(data)) {
		pid, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(f, "/proc/"), "/environ"))
		if contains(skip, pid) {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		alive = append(alive, strconv.Itoa(pid)+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return alive, strings.TrimSpace(r.stdout)
}

func waitCond(t *testing.T, what string, timeout time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill -9 of fence run (the OOM killer, systemd's stop timeout): the shim
// sees its control pipe close and kills the whole tree.
func TestRunKill9KillsWholeTree(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) { testKill9(t, b, "kill9-"+b.prefix) })
}

// The same without a cgroup: the subreaper walk alone must find the tree.
func TestRunKill9KillsWholeTreeWithoutCgroup(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	b := sqliteOnly(t)
	b.extra = []string{"FENCE_SUPERVISE_NO_CGROUP=1"}
	testKill9(t, b, "kill9-nocg-"+strconv.Itoa(os.Getpid()))
}

func testKill9(t *testing.T, b *backend, mark string) {
	{
		a := markedBackend(t, b, mark)
		started := filepath.Join(b.dir, "started")
		p := a.start(t, "run", "--lease", "killme", "--ttl", "3s", "--", "sh", "-c",
			"sleep 1000 & setsid sleep 1001 & touch "+started+"; sleep 1000")
		waitFile(t, started, 30*time.Second)
		waitCond(t, "both sleeps started", 10*time.Second, func() bool { return len(marked(mark)) >= 6 })
		p.signal(syscall.SIGKILL)
		p.wait(time.Minute)

		// Nobody finished the run: once its lease expired it is not
		// "running" any more, but lost with an unknown outcome.
		var first int64
		waitCond(t, "the killed holder's lease expired", 30*time.Second, func() bool {
			l := b.lease(t, "killme")
			first = l.Fence
			return l.State == "expired"
		})
		runs := b.runsJSON(t, "--lease", "killme")
		if len(runs) != 1 || runs[0].Status != "lost" || runs[0].Error == nil || *runs[0].Error != ops.ExpiredOutcome {
			t.Errorf("a run whose lease expired unfinished should show as lost (%s): %+v", ops.ExpiredOutcome, runs)
		}
		if r := b.fence(t, "runs", "--lease", "killme"); !strings.Contains(r.stdout, "lost") || strings.Contains(r.stdout, "…") {
			t.Errorf("fence runs should not show the dead run as running:\n%s", r.stdout)
		}

		alive, fence := nextHolderFinds(t, b, "killme", mark)
		if n, err := strconv.ParseInt(fence, 10, 64); err != nil || n <= first {
			t.Errorf("the next holder got fence %q, want one above the killed holder's %d", fence, first)
		}
		if len(alive) > 0 {
			t.Errorf("processes of the killed fence run's command alive when the next holder got the lease:\n%s", strings.Join(alive, "\n"))
		}
	}
}

// kill -STOP of fence run cannot be caught: the shim's dead-man's switch,
// fed with each proven deadline, kills the tree before the lease could
// lapse; fence run says so when continued.
func TestRunSIGSTOPOfSupervisorKillsTree(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) {
		mark := "stop-" + b.prefix
		a := markedBackend(t, b, mark)
		started := filepath.Join(b.dir, "started")
		p := a.start(t, "run", "--lease", "stopped", "--ttl", "3s", "--", "sh", "-c",
			"exec 2>/dev/null; setsid sleep 1002 & touch "+started+"; while :; do sleep 0.05; done")
		waitFile(t, started, 30*time.Second)
		first := b.lease(t, "stopped").Fence
		p.signal(syscall.SIGSTOP)

		// fence run itself (stopped) carries the mark; nothing else may.
		alive, fence := nextHolderFinds(t, b, "stopped", mark, p.cmd.Process.Pid)
		if n, err := strconv.ParseInt(fence, 10, 64); err != nil || n <= first {
			t.Errorf("the next holder got fence %q, want one above the stopped holder's %d", fence, first)
		}
		if len(alive) > 0 {
			t.Errorf("processes of the stopped fence run's command alive when the next holder got the lease:\n%s", strings.Join(alive, "\n"))
		}
		p.signal(syscall.SIGCONT)
		r := p.wait(time.Minute)
		if r.code != ExitLost {
			t.Fatalf("after SIGCONT: want 76: %v", r)
		}
		oneErrorLine(t, r, "fence's shim killed the command's process tree")
	})
}

// ^Z (SIGTSTP) stops the command's whole tree before fence; if on SIGCONT
// the lease could have lapsed, the tree is killed without running again.
func TestRunSuspendPastTTLThenContinue(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) {
		started := filepath.Join(b.dir, "started")
		ticks := filepath.Join(b.dir, "ticks")
		p := b.start(t, "--log-level", "info", "run", "--lease", "tstp", "--ttl", "3s", "--", "sh", "-c",
			"exec 2>/dev/null; : > "+ticks+"; touch "+started+"; while :; do echo t >> "+ticks+"; sleep 0.02; done")
		waitFile(t, started, 30*time.Second)
		p.signal(syscall.SIGTSTP)
		p.waitStderr("fence: command stopped; stopping fence", 30*time.Second)
		st, err := os.Stat(ticks)
		if err != nil {
			t.Fatal(err)
		}
		before := st.Size()

		// The lease lapses while fence is stopped; the next holder gets it.
		rb := b.fence(t, "run", "--lease", "tstp", "--wait", "60s", "--", "true")
		if rb.code != 0 {
			t.Fatalf("the next holder: %v", rb)
		}
		p.signal(syscall.SIGCONT)
		r := p.wait(time.Minute)
		if r.code != ExitLost {
			t.Fatalf("after SIGCONT: want 76: %v", r)
		}
		st, _ = os.Stat(ticks)
		if st.Size() != before {
			t.Errorf("the command ran on after ^Z: its tick file grew from %d to %d bytes\n%v", before, st.Size(), r)
		}
		last := lastLine(r.stderr)
		if !strings.Contains(last, "without running again") && !strings.Contains(last, "fence's shim killed") {
			t.Errorf("fence run should say the stopped command was killed without running again: %s", r.stderr)
		}
		if strings.Contains(r.stderr, "SIGTERM") {
			t.Errorf("a stopped command past its lease gets SIGKILL, not SIGTERM (which it would run a handler for): %s", r.stderr)
		}
	})
}

// ^Z and fg within the TTL: the command resumes and completes normally
// (with the cgroup freezer, and with SIGSTOP of every process of the tree).
func TestRunSuspendWithinTTLResumes(t *testing.T) {
	t.Run("cgroup", func(t *testing.T) { testSuspendResume(t, sqliteOnly(t)) })
	t.Run("subreaper", func(t *testing.T) {
		b := sqliteOnly(t)
		b.extra = []string{"FENCE_SUPERVISE_NO_CGROUP=1"}
		testSuspendResume(t, b)
	})
}

func testSuspendResume(t *testing.T, b *backend) {
	started := filepath.Join(b.dir, "started")
	goOn := filepath.Join(b.dir, "go-on")
	p := b.start(t, "--log-level", "info", "run", "--lease", "fg", "--ttl", "30s", "--", "sh", "-c",
		"touch "+started+"; while ! test -e "+goOn+"; do sleep 0.02; done; echo resumed")
	waitFile(t, started, 30*time.Second)
	p.signal(syscall.SIGTSTP)
	p.waitStderr("fence: command stopped; stopping fence", 30*time.Second)
	if err := os.WriteFile(goOn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGCONT)
	if r := p.wait(time.Minute); r.code != 0 || r.stdout != "resumed\n" {
		t.Errorf("after fg within the TTL the command should complete: %v", r)
	}
}

// A revoke is definite: SIGTERM to every process of the tree at the next
// renewal, SIGKILL at min(now + grace, lapse - margin); a descendant in
// its own session is not spared. The exit status is recorded in the run.
func TestRunRevokeStopsWholeTree(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) {
		mark := "revoke-" + b.prefix
		a := markedBackend(t, b, mark)
		started := filepath.Join(b.dir, "started")
		term := filepath.Join(b.dir, "term")
		script := `exec 2>/dev/null; trap 'date +%s%N >> ` + term + `' TERM; ` +
			`setsid sh -c 'trap "" TERM; while :; do sleep 0.05; done' & ` +
			`touch ` + started + `; while :; do sleep 0.05; done`
		p := a.start(t, "run", "--lease", "revoke", "--ttl", "3s", "--grace", "60s", "--", "sh", "-c", script)
		waitFile(t, started, 30*time.Second)
		waitCond(t, "the setsid child started", 10*time.Second, func() bool { return len(marked(mark)) >= 5 })

		rel := time.Now()
		gone := make(chan time.Time, 1)
		go func() {
			for len(marked(mark, p.cmd.Process.Pid)) > 0 {
				time.Sleep(5 * time.Millisecond)
			}
			gone <- time.Now()
		}()
		if r := b.fence(t, "release", "revoke", "--force", "--yes"); r.code != 0 {
			t.Fatal(r)
		}
		r := p.wait(time.Minute)
		if r.code != ExitLost {
			t.Fatalf("after the revoke: want 76: %v", r)
		}
		var killed time.Time
		select {
		case killed = <-gone:
		case <-time.After(30 * time.Second):
			t.Fatalf("processes of the revoked command still alive:\n%s", strings.Join(marked(mark), "\n"))
		}
		tb, _ := os.ReadFile(term)
		ns, _ := strconv.ParseInt(strings.Fields(string(tb) + " 0")[0], 10, 64)
		if ns == 0 {
			t.Fatalf("the command got no SIGTERM: %v", r)
		}
		termAfter, killAfter := time.Unix(0, ns).Sub(rel), killed.Sub(rel)
		t.Logf("%s: revoke -> SIGTERM %v, revoke -> whole tree dead (SIGKILL) %v", b.name, termAfter.Round(time.Millisecond), killAfter.Round(time.Millisecond))
		// The renewal that meets the revoke comes within TTL/3 (1s); both
		// bounds are generous for a loaded machine.
		if termAfter > 5*time.Second || killAfter > 10*time.Second {
			t.Errorf("too slow: SIGTERM %v, SIGKILL %v after the revoke", termAfter, killAfter)
		}
		oneErrorLine(t, r, "lease revoke fence ")
		if !regexp.MustCompile(`lease revoke fence [0-9]+ revoked \(fence is now [0-9]+\)`).MatchString(r.stderr) || strings.Contains(r.stderr, "was fence stopped") {
			t.Errorf("the message should say the lease was revoked, and not blame a stopped fence:\n%s", r.stderr)
		}
		runs := b.runsJSON(t, "--lease", "revoke")
		if len(runs) != 1 || runs[0].Status != "lost" || runs[0].Error == nil ||
			!regexp.MustCompile(`SIGKILL .*status 137`).MatchString(*runs[0].Error) {
			t.Errorf("the lost run should record how its command ended: %+v", runs)
		}
	})
}

// Completion: whatever the command left behind, in any session, dies with
// it.
func TestRunCompletionKillsDetachedDescendants(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) {
		mark := "done-" + b.prefix
		a := markedBackend(t, b, mark)
		r := a.fence(t, "run", "--lease", "detach", "--", "bash", "-c",
			"setsid sleep 1003 & set -m; sleep 1004 & (sleep 1005 &) ; sleep 1; exit 0")
		if r.code != 0 {
			t.Fatal(r)
		}
		if alive := marked(mark); len(alive) > 0 {
			t.Errorf("descendants outlived the run:\n%s", strings.Join(alive, "\n"))
		}
	})
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return l[len(l)-1]
}
