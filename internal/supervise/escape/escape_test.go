//go:build linux

package escape

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencekit/fence/internal/testdb"
)

// The suite's TTL, and the bounds that cmd/fence/README.md documents: after
// a revoke, nothing of the job runs later than TTL + killBound; after the
// job tampered with the supervisor, nothing runs later than killBound.
const (
	ttl       = 3 * time.Second
	killBound = time.Second
	// bestEffortKillBound is the bound after a tampering in a best-effort
	// mode, where without a PID namespace the shim's sweep reaps orphans
	// one by one (measured: shim killed, 0.05 s; shim stopped, 2.33 s, its
	// heartbeats stopping within 0.03 s).
	bestEffortKillBound = 4 * time.Second
)

// startAttempts is how often a scenario is started when fence refuses to
// start its job because the lease was granted too slowly.
const startAttempts = 3

// notStarted is the result of a scenario whose fence refused to start the
// job for that reason.
const notStarted = "not started"

// helperEnv makes this test binary one of the hostile job's own programs.
const helperEnv = "ESC_HELPER"

// Every heartbeat writer gives up after this many beats (0.1 s each), so
// that a process that escaped does not run for ever (and a scenario that
// escapes as documented does not hold the suite for long).
const beats = 400

func init() {
	// The threadexit helper ends its main thread: the main goroutine must
	// be on it.
	if os.Getenv(helperEnv) != "" {
		runtime.LockOSThread()
	}
}

var fenceBin string

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "threadexit":
		threadExit()
	case "subreaper":
		subreaper()
	case "attack":
		attack()
	case "":
	default:
		os.Exit(2)
	}
	os.Exit(buildAndRun(m))
}

// threadExit writes the "thread" heartbeat from a second thread while the
// main thread has exited: /proc shows the process as a zombie (its leader),
// yet it runs.
func threadExit() {
	go func() {
		beat("thread")
		os.Exit(0)
	}()
	time.Sleep(200 * time.Millisecond) // the goroutine is on a thread of its own
	syscall.Syscall(unix.SYS_EXIT, 0, 0, 0)
}

// subreaper makes itself a child subreaper, starts a child that orphans a
// heartbeat writer (which comes back to it), and beats itself.
func subreaper() {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	_ = exec.Command("sh", "-c", `sh "$ESC_DIR/hb.sh" orphan & exit 0`).Run()
	beat("reaper")
	os.Exit(0)
}

// attack is the job's attack on fence and its shim by their pids as the
// host sees them (which the test gives it in $ESC_DIR/pids): kill(2),
// pidfd_open(2) and a /proc/PID directory as a pidfd, each with
// $ESC_SIG. It writes what each returned to $ESC_DIR/attack.
func attack() {
	dir := os.Getenv("ESC_DIR")
	sig := unix.SIGKILL
	if os.Getenv("ESC_SIG") == "STOP" {
		sig = unix.SIGSTOP
	}
	b, _ := os.ReadFile(filepath.Join(dir, "pids"))
	var out []string
	res := func(err error) string {
		if err == nil {
			return "ok"
		}
		if e, ok := err.(syscall.Errno); ok {
			return unix.ErrnoName(e)
		}
		return err.Error()
	}
	for i, f := range strings.Fields(string(b)) {
		who := [...]string{"fence", "shim"}[min(i, 1)]
		pid, _ := strconv.Atoi(f)
		if pid <= 1 {
			continue
		}
		r := []string{"kill=" + res(unix.Kill(pid, sig))}
		if fd, err := unix.PidfdOpen(pid, 0); err != nil {
			r = append(r, "pidfd="+res(err))
		} else {
			r = append(r, "pidfd="+res(unix.PidfdSendSignal(fd, sig, nil, 0)))
			unix.Close(fd)
		}
		if fd, err := unix.Open(fmt.Sprintf("/proc/%d", pid), unix.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
			r = append(r, "procfd="+res(err))
		} else {
			r = append(r, "procfd="+res(unix.PidfdSendSignal(fd, sig, nil, 0)))
			unix.Close(fd)
		}
		out = append(out, who+" "+strings.Join(r, ","))
	}
	_ = os.WriteFile(filepath.Join(dir, "attack"), []byte(strings.Join(out, "; ")), 0o644)
	os.Exit(0)
}

func beat(name string) {
	f := filepath.Join(os.Getenv("ESC_DIR"), "hb."+name)
	for i := 0; i < beats; i++ {
		_ = os.WriteFile(f, []byte(strconv.Itoa(i)), 0o644)
		time.Sleep(100 * time.Millisecond)
	}
}

func buildAndRun(m *testing.M) int {
	if fenceBin = os.Getenv("FENCE_ESCAPE_FENCE"); fenceBin != "" || !testdb.LongEnabled() {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "fence-escape-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fenceBin = filepath.Join(dir, "fence")
	out, err := exec.Command("go", "build", "-o", fenceBin, "github.com/fencekit/fence/cmd/fence").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building fence: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

const hbScript = `f="$ESC_DIR/hb.$1"; i=0
while [ $i -lt ` + "900" + ` ]; do echo $i > "$f"; sleep 0.1; i=$((i+1)); done
`

// hop forks its next copy and exits, every 50 ms: a new pid each time.
const hopScript = `echo $1 > "$ESC_DIR/hb.hop"; sleep 0.05
[ "$1" -lt 1800 ] && sh "$ESC_DIR/hop.sh" $(($1 + 1)) &
exit 0
`

type scenario struct {
	name     string
	rootOnly bool
	hb       []string // heartbeats started before "ready" (besides main)
	body     string   // shell lines that start them
	tamper   string   // the attack on the supervisor, after "ready"; "" = a revoke
	pids     bool     // the attack needs $ESC_DIR/pids (fence's and the shim's host pids)
	// escapesBestEffort: a best-effort supervisor cannot hold it, and must
	// say so at start (the class of escape its warning names).
	escapesBestEffort string
}

var scenarios = []scenario{
	{name: "double-fork", hb: []string{"df"}, body: `( $H df & ) &`},
	{name: "setsid", hb: []string{"setsid"}, body: `setsid $H setsid &`},
	{name: "nohup", hb: []string{"nohup"}, body: `nohup $H nohup >/dev/null 2>&1 &`},
	{name: "pid-namespace", hb: []string{"pidns"},
		body: `if [ "$(id -u)" = 0 ]; then unshare -p -f $H pidns & else unshare -U -r -p -f $H pidns & fi`},
	{name: "subreaper", hb: []string{"reaper", "orphan"}, body: `ESC_HELPER=subreaper "$ESC_SELF" &`},
	{name: "stopped-child", body: `sh -c 'kill -STOP $$; exit 0' &`},
	{name: "ignores-sigterm", hb: []string{"noterm"}, body: `trap '' TERM; $H noterm &`},
	{name: "main-thread-exited", hb: []string{"thread"}, body: `ESC_HELPER=threadexit "$ESC_SELF" &`},
	{name: "fork-exit-loop", hb: []string{"hop"}, body: `sh "$ESC_DIR/hop.sh" 0 &`},
	{name: "shim-kill-9", hb: []string{"t"}, body: `setsid $H t &`, tamper: `kill -9 $PPID`},
	{name: "shim-sigstop", hb: []string{"t"}, body: `setsid $H t &`, tamper: `kill -STOP $PPID`},
	// The job knows fence's and the shim's pids as the host numbers them
	// (the test writes them to $ESC_DIR/pids; a job could read them from a
	// /proc that shows the host's processes) and signals both by number,
	// by pidfd_open and by a /proc/PID directory used as a pidfd.
	{name: "fence-and-shim-sigstop", hb: []string{"t"}, body: `setsid $H t &`, pids: true,
		tamper:            `ESC_HELPER=attack ESC_SIG=STOP "$ESC_SELF"; kill -STOP $PPID`,
		escapesBestEffort: "fence and its shim both stopped or killed"},
	{name: "fence-and-shim-kill-9", hb: []string{"t"}, body: `setsid $H t &`, pids: true,
		tamper:            `ESC_HELPER=attack ESC_SIG=KILL "$ESC_SELF"; kill -9 $PPID`,
		escapesBestEffort: "fence and its shim both stopped or killed"},
	// A heartbeat writer moves itself out of fence's cgroup, into the
	// directory fence's cgroup was made in (delegated to this user) or the
	// hierarchy's root, before the revoke.
	{name: "cgroup-move", hb: []string{"cgmove"},
		body: `sh -c 'for d in "$ESC_CGPARENT" "$ESC_CGROOT"; do [ -n "$d" ] && echo $$ > "$d/cgroup.procs" 2>/dev/null && echo "$d" > "$ESC_DIR/moved" && break; done; exec sh "$ESC_DIR/hb.sh" cgmove' &`},
}

func jobScript(sc scenario) string {
	var b strings.Builder
	b.WriteString("cd \"$ESC_DIR\"\nH=\"sh $ESC_DIR/hb.sh\"\n")
	b.WriteString(sc.body + "\n")
	b.WriteString("touch \"$ESC_DIR/ready\"\n")
	if sc.pids {
		b.WriteString("while [ ! -f \"$ESC_DIR/pids\" ]; do sleep 0.05; done\n")
	}
	if sc.tamper != "" {
		// Give the heartbeats time to start, then attack.
		b.WriteString("sleep 0.5\ndate +%s%N > \"$ESC_DIR/tamper.tmp\"; mv \"$ESC_DIR/tamper.tmp\" \"$ESC_DIR/tamper\"\n")
		b.WriteString(sc.tamper + "\n")
	}
	b.WriteString("exec sh \"$ESC_DIR/hb.sh\" main\n")
	return b.String()
}

// mode is how fence run is started: its containment, chosen by the
// environment (as an operator could) and flags.
type mode struct {
	name       string
	env        []string
	flags      []string
	tree       string // what fence must say holds the tree (its "tree=" log), a prefix
	cgroup     bool   // fence run --cgroup $FENCE_ESCAPE_CGROUP (a delegated directory)
	bestEffort bool   // fence must warn at start that containment is best effort
	refuse     bool   // fence must refuse to start the job
}

// cgroupEnv names the delegated cgroup v2 directory of the modes with
// --cgroup (CI makes one and delegates it to its unprivileged user).
const cgroupEnv = "FENCE_ESCAPE_CGROUP"

var modes = []mode{
	{name: "contained", tree: "pid-namespace"},
	{name: "delegated-cgroup", cgroup: true, tree: "pid-namespace+cgroup"},
	{name: "delegated-cgroup-no-namespace", env: []string{"FENCE_SUPERVISE_NO_NAMESPACE=1"}, cgroup: true, tree: "cgroup", bestEffort: true},
	{name: "best-effort", env: []string{"FENCE_SUPERVISE_NO_NAMESPACE=1", "FENCE_SUPERVISE_NO_CGROUP=1"}, tree: "subreaper", bestEffort: true},
	{name: "require-containment", env: []string{"FENCE_SUPERVISE_NO_NAMESPACE=1", "FENCE_SUPERVISE_NO_CGROUP=1"},
		flags: []string{"--require-containment"}, refuse: true},
}

type row struct {
	mode, scenario, result string
	lastHB, dead, bound    time.Duration
	ok                     bool
	note                   string
}

func (r row) String() string {
	s := fmt.Sprintf("escape: uid=%d mode=%s scenario=%s result=%s", os.Geteuid(), r.mode, r.scenario, r.result)
	if r.result != "refused" {
		s += fmt.Sprintf(" last-heartbeat=%s dead=%s bound=%s", secs(r.lastHB), secs(r.dead), secs(r.bound))
	}
	if r.note != "" {
		s += " (" + r.note + ")"
	}
	return s
}

func secs(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%+.2fs", d.Seconds())
}

// TestEscape runs every scenario in every mode, all in parallel (run it
// with -test.parallel above the number of scenarios: each mostly waits),
// and prints the table.
func TestEscape(t *testing.T) {
	testdb.Long(t)
	var mu sync.Mutex
	var rows []row
	t.Cleanup(func() {
		sort.SliceStable(rows, func(i, j int) bool {
			if rows[i].mode != rows[j].mode {
				return modeIndex(rows[i].mode) < modeIndex(rows[j].mode)
			}
			return rows[i].scenario < rows[j].scenario
		})
		for _, r := range rows {
			fmt.Println(r)
		}
	})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			if m.cgroup && os.Getenv(cgroupEnv) == "" {
				t.Skipf("%s names no delegated cgroup v2 directory (.ci/run's step_escape makes one)", cgroupEnv)
			}
			for _, sc := range scenarios {
				if sc.rootOnly && os.Geteuid() != 0 {
					continue
				}
				if m.refuse && sc.name != "setsid" {
					continue // one refusal says it
				}
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					// A fence run that refused to start the job because the
					// database was slow to grant the lease (a loaded machine)
					// says nothing about containment: that attempt is run again.
					r := runScenario(t, m, sc)
					for i := 1; i < startAttempts && r.result == notStarted; i++ {
						t.Logf("attempt %d: %s", i, r.note)
						r = runScenario(t, m, sc)
					}
					mu.Lock()
					rows = append(rows, r)
					mu.Unlock()
					if !r.ok {
						t.Errorf("%s", r)
					}
				})
			}
		})
	}
}

func modeIndex(name string) int {
	for i, m := range modes {
		if m.name == name {
			return i
		}
	}
	return len(modes)
}

func runScenario(t *testing.T, m mode, sc scenario) row {
	r := row{mode: m.name, scenario: sc.name, lastHB: -1, dead: -1}
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	mark := randHex()
	self, err := os.Executable()
	must(t, err)
	for name, body := range map[string]string{"hb.sh": hbScript, "hop.sh": hopScript, "job.sh": jobScript(sc)} {
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	cgParent := os.Getenv(cgroupEnv)
	if !m.cgroup {
		cgParent = ownCgroup(t)
	}
	env := []string{"FENCE_DSN=sqlite:" + filepath.Join(dir, "fence.db"), "ESC_DIR=" + dir, "ESC_MARK=" + mark, "ESC_SELF=" + self,
		"ESC_CGPARENT=" + cgParent, "ESC_CGROOT=" + cgroupRoot(t)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCE_") && !strings.HasPrefix(kv, "ESC_") {
			env = append(env, kv)
		}
	}
	env = append(env, m.env...)
	if out, err := fenceCmd(dir, env, "migrate").CombinedOutput(); err != nil {
		t.Fatalf("fence migrate: %v\n%s", err, out)
	}

	args := append([]string{"--log-level", "info", "run", "--lease", "esc", "--ttl", ttl.String(), "--grace", "60s"}, m.flags...)
	if m.cgroup {
		args = append(args, "--cgroup", cgParent)
	}
	args = append(args, "--", "sh", filepath.Join(dir, "job.sh"))
	first := fenceCmd(dir, env, args...)
	var stderr syncBuffer
	first.Stderr = &stderr
	must(t, first.Start())
	exited := make(chan struct{})
	var exitCode int
	go func() {
		_ = first.Wait()
		exitCode = first.ProcessState.ExitCode()
		close(exited)
	}()
	// At the end: fence run (stopped, perhaps), its shim, and what is left
	// of the job; nothing else.
	// The job's processes first: an escaped one holds fence's stderr open,
	// and Wait waits for it.
	t.Cleanup(func() {
		killMarked(mark)
		select {
		case <-exited:
		default:
			for _, c := range childrenOf(first.Process.Pid) {
				sigkill(c)
			}
			_ = first.Process.Kill()
			<-exited
		}
		killMarked(mark)
	})

	if m.refuse {
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			r.result, r.note = "not refused", "fence run still running after 60s"
			return r
		}
		_, err := os.Stat(filepath.Join(dir, "ready"))
		switch {
		case err == nil:
			r.result, r.note = "ran", "the job ran although containment was required"
		case exitCode == 0 || !strings.Contains(stderr.String(), "real containment"):
			r.result, r.note = "not refused", fmt.Sprintf("exit %d: %s", exitCode, oneLine(stderr.String()))
		default:
			r.result, r.ok, r.note = "refused", true, fmt.Sprintf("exit %d", exitCode)
		}
		return r
	}

	if sc.pids {
		// The job is started (its shim is fence's only child now, not
		// the probe) once it says ready; it waits for the pids.
		waitFor(30*time.Second, func() bool {
			select {
			case <-exited:
				return true
			default:
			}
			_, err := os.Stat(filepath.Join(dir, "ready"))
			return err == nil
		})
		var shim int
		waitFor(10*time.Second, func() bool {
			c := childrenOf(first.Process.Pid)
			if len(c) > 0 {
				shim = c[0]
			}
			return shim != 0
		})
		tmp := filepath.Join(dir, "pids.tmp")
		must(t, os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", first.Process.Pid, shim)), 0o644))
		must(t, os.Rename(tmp, filepath.Join(dir, "pids")))
	}
	hbs := append([]string{"main"}, sc.hb...)
	if sc.tamper != "" {
		// The main heartbeat starts after the attack, which may end the
		// tree at once (fence sees its shim stopped within 50 ms).
		hbs = sc.hb
	}
	started := func() bool {
		for _, h := range hbs {
			if _, err := os.Stat(filepath.Join(dir, "hb."+h)); err != nil {
				return false
			}
		}
		return true
	}
	waitFor(30*time.Second, func() bool {
		select {
		case <-exited:
			return true
		default:
			return started()
		}
	})
	if !started() {
		select {
		case <-exited:
			if strings.Contains(stderr.String(), "the database was slow to grant the lease") {
				r.result, r.note = notStarted, "fence refused to start the job: "+oneLine(stderr.String())
				return r
			}
		default:
		}
		t.Fatalf("the job's heartbeats did not all start within 30s; fence's stderr:\n%s", stderr.String())
	}
	warned := strings.Contains(stderr.String(), "best effort")
	if m.tree != "" && !strings.Contains(stderr.String(), "tree="+m.tree) {
		t.Fatalf("fence did not say the tree is held by %s; its stderr:\n%s", m.tree, stderr.String())
	}

	// The loss: a revoke, or the job's own attack on the supervisor.
	var t0 time.Time
	bound := killBound
	// deadAt is when no process of the job was left, from the first
	// observation on (watched while waiting too: a tree killed during the
	// wait for a second holder died then, not when the wait ended).
	deadAt := time.Time{}
	watch := func(until time.Time) {
		for ; time.Now().Before(until); time.Sleep(20 * time.Millisecond) {
			if len(marked(mark)) == 0 {
				if deadAt.IsZero() {
					deadAt = time.Now()
				}
			} else {
				deadAt = time.Time{}
			}
		}
	}
	if m.bestEffort && sc.tamper != "" {
		bound = bestEffortKillBound
	}
	var second *exec.Cmd
	var secondDone chan struct{}
	if sc.tamper == "" {
		bound += ttl
		t0 = time.Now()
		if out, err := fenceCmd(dir, env, "revoke", "esc", "--yes").CombinedOutput(); err != nil {
			t.Fatalf("fence revoke: %v\n%s", err, out)
		}
	} else {
		tf := filepath.Join(dir, "tamper")
		if !waitFor(30*time.Second, func() bool { _, err := os.Stat(tf); return err == nil }) {
			t.Fatal("the job did not attack within 30s")
		}
		b, _ := os.ReadFile(tf)
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		must(t, err)
		t0 = time.Unix(0, ns)
		// A second holder waits for the lease: its job may start only once
		// nothing of the first one runs.
		second = fenceCmd(dir, env, "run", "--lease", "esc", "--wait", "20s", "--", "sh", "-c",
			`date +%s%N > "$ESC_DIR/second"`)
		must(t, second.Start())
		secondDone = make(chan struct{})
		go func() { _ = second.Wait(); close(secondDone) }()
		sp, sd := second.Process, secondDone
		t.Cleanup(func() { _ = sp.Kill(); <-sd })
		// An attack that could not reach the supervisor changes nothing:
		// fence runs on, its shim is not stopped, and the job keeps its
		// lease; then a revoke must stop it as in the other scenarios.
		watch(t0.Add(bound + 500*time.Millisecond))
		if len(marked(mark)) > 0 && intact(first, exited) {
			deadAt = time.Time{}
			_ = sp.Kill()
			<-sd
			second = nil
			r.note = "the attack did not reach the supervisor; revoked"
			bound += ttl
			t0 = time.Now()
			if out, err := fenceCmd(dir, env, "revoke", "esc", "--yes").CombinedOutput(); err != nil {
				t.Fatalf("fence revoke: %v\n%s", err, out)
			}
		}
	}
	r.bound = bound

	// Watch until the bound and a second more.
	watch(t0.Add(bound + time.Second))
	if !deadAt.IsZero() {
		r.dead = deadAt.Sub(t0)
	}
	r.lastHB = lastBeat(dir).Sub(t0)
	alive := marked(mark)
	held := len(alive) == 0 && r.lastHB <= bound && !deadAt.IsZero() && r.dead <= bound
	if second != nil {
		select {
		case <-secondDone:
		case <-time.After(30 * time.Second):
		}
		if b, err := os.ReadFile(filepath.Join(dir, "second")); err == nil {
			ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if lb := lastBeat(dir); ns != 0 && !lb.Before(time.Unix(0, ns)) {
				held = false
				r.note = fmt.Sprintf("a second holder's job started %s after the attack while the first's still ran", secs(time.Unix(0, ns).Sub(t0)))
			}
		}
	}
	switch {
	case held:
		r.result, r.ok = "held", true
	case m.bestEffort && sc.escapesBestEffort != "" && warned && strings.Contains(stderr.String(), sc.escapesBestEffort):
		r.result, r.ok = "escaped (warned)", true
	default:
		r.result = "escaped"
		if len(alive) > 0 && r.note == "" {
			r.note = fmt.Sprintf("%d processes alive", len(alive))
		}
	}
	if m.bestEffort && !warned {
		r.ok = false
		r.note = strings.TrimPrefix(r.note+"; fence did not warn that containment is best effort", "; ")
	}
	if !m.bestEffort && warned {
		r.ok = false
		r.note = strings.TrimPrefix(r.note+"; fence warned of best-effort containment", "; ")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "attack")); err == nil {
		r.note = strings.TrimPrefix(r.note+"; the job's attack: "+strings.TrimSpace(string(b)), "; ")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "moved")); err == nil {
		r.note = strings.TrimPrefix(r.note+"; the job moved itself to "+strings.TrimSpace(string(b)), "; ")
	}
	// With a cgroup, fence ends only once its cgroup is proven empty
	// (populated 0) and then removes it: none of this run's may be left.
	if m.cgroup && r.result == "held" {
		select {
		case <-exited:
			left, _ := filepath.Glob(filepath.Join(cgParent, fmt.Sprintf("fence-run-%d-*", first.Process.Pid)))
			if len(left) > 0 {
				r.ok = false
				r.note = strings.TrimPrefix(r.note+"; fence ended and left its cgroup "+strings.Join(left, " "), "; ")
			}
		case <-time.After(10 * time.Second):
			r.ok = false
			r.note = strings.TrimPrefix(r.note+"; fence did not end within 10s of the bound", "; ")
		}
	}
	if !r.ok {
		t.Logf("fence run's stderr:\n%s", stderr.String())
	}
	return r
}

// ownCgroup is this process's cgroup v2 directory, cgroupRoot the
// hierarchy's mount: where a job could try to move itself.
func ownCgroup(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/cgroup")
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return filepath.Join(cgroupRoot(t), p)
		}
	}
	return ""
}

func cgroupRoot(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if f := strings.Fields(pre); ok && strings.HasPrefix(post, "cgroup2 ") && len(f) >= 5 && f[3] == "/" {
			return f[4]
		}
	}
	return ""
}

func fenceCmd(dir string, env []string, args ...string) *exec.Cmd {
	c := exec.Command(fenceBin, args...)
	c.Dir, c.Env = dir, env
	return c
}

// lastBeat is the latest modification of any heartbeat file.
func lastBeat(dir string) time.Time {
	var last time.Time
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "hb.") {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
	}
	return last
}

// marked lists the live processes that carry ESC_MARK=mark in their
// environment, except fence's own (fence run, its shim): those are the
// supervisor, not the job. One scan of /proc, at most every 50 ms, serves
// every scenario running in parallel (a scan per scenario loaded the
// machine enough to slow the kills it measures).
func marked(mark string) []int {
	procScan.mu.Lock()
	defer procScan.mu.Unlock()
	if time.Since(procScan.at) > 50*time.Millisecond {
		procScan.byMark = scanMarks()
		procScan.at = time.Now()
	}
	return procScan.byMark[mark]
}

var procScan struct {
	mu     sync.Mutex
	at     time.Time
	byMark map[string][]int
}

// scanMarks maps each ESC_MARK value to the live processes that carry it.
// A process whose main thread has exited has no environment of its own in
// /proc: its other threads are read then.
func scanMarks() map[string][]int {
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		base := "/proc/" + e.Name()
		env, _ := os.ReadFile(base + "/environ")
		if len(env) == 0 {
			tasks, _ := os.ReadDir(base + "/task")
			for _, tk := range tasks {
				if env, _ = os.ReadFile(base + "/task/" + tk.Name() + "/environ"); len(env) > 0 {
					break
				}
			}
		}
		env = append([]byte{0}, env...)
		i := bytes.Index(env, []byte("\x00ESC_MARK="))
		if i < 0 {
			continue
		}
		v := env[i+len("\x00ESC_MARK="):]
		if k := bytes.IndexByte(v, 0); k >= 0 {
			v = v[:k]
		}
		if cmd, _ := os.ReadFile(base + "/cmdline"); bytes.HasPrefix(cmd, []byte(fenceBin+"\x00")) {
			continue
		}
		if !liveTask(base) {
			continue
		}
		out[string(v)] = append(out[string(v)], pid)
	}
	return out
}

// liveTask says whether some thread of the process is neither a zombie nor
// dead.
func liveTask(base string) bool {
	tasks, _ := os.ReadDir(base + "/task")
	for _, tk := range tasks {
		st, _ := os.ReadFile(base + "/task/" + tk.Name() + "/stat")
		if i := bytes.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) && st[i+2] != 'Z' && st[i+2] != 'X' {
			return true
		}
	}
	return false
}

// killMarked SIGKILLs what is left of one scenario (its own processes only,
// found by their mark), for at most ten seconds.
func killMarked(mark string) {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		ps := marked(mark)
		if len(ps) == 0 {
			return
		}
		for _, p := range ps {
			sigkill(p)
		}
	}
}

// intact says whether fence run still runs and its shim is not stopped.
func intact(first *exec.Cmd, exited <-chan struct{}) bool {
	select {
	case <-exited:
		return false
	default:
	}
	if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", first.Process.Pid)); stopped(st) {
		return false
	}
	for _, c := range childrenOf(first.Process.Pid) {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c)); stopped(st) {
			return false
		}
	}
	return true
}

func stopped(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'T' || stat[i+2] == 't')
}

// childrenOf lists pid's children.
func childrenOf(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, tk := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, tk.Name()))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func sigkill(pid int) {
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		unix.Close(fd)
	}
}

func waitFor(d time.Duration, f func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return f()
}

func randHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

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
