//go:build linux

package cli

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cgroup2Root is where the cgroup v2 hierarchy is mounted, or "".
func cgroup2Root(t *testing.T) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if fl := strings.Fields(pre); ok && strings.HasPrefix(post, "cgroup2 ") && len(fl) >= 5 && fl[3] == "/" {
			return fl[4]
		}
	}
	return ""
}

// cgroup1Dir is the mount of some cgroup v1 hierarchy, or "".
func cgroup1Dir(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if fl := strings.Fields(pre); ok && strings.HasPrefix(post, "cgroup ") && len(fl) >= 5 && fl[3] == "/" {
			return fl[4]
		}
	}
	return ""
}

// --cgroup names a directory that cannot hold fence's cgroups: fence run
// refuses (126) before it starts anything, and says why.
func TestRunCgroupFlagRefusesUnusableDirectory(t *testing.T) {
	b := sqliteOnly(t)
	cases := []struct{ name, dir, want string }{
		{"relative", "fence-relative", "is not an absolute path"},
		{"not-a-cgroup", b.dir, "is not a cgroup, not a cgroup v2 directory"},
		{"missing", filepath.Join(b.dir, "no-such-dir"), "no such file or directory"},
	}
	if v1 := cgroup1Dir(t); v1 != "" {
		cases = append(cases, struct{ name, dir, want string }{"cgroup-v1", v1, "is a cgroup v1 directory"})
	} else {
		t.Log("no cgroup v1 hierarchy here: the v1 case is not run")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ran := filepath.Join(b.dir, "ran-"+c.name)
			r := b.fence(t, "run", "--cgroup", c.dir, "--lease", "cg-"+c.name, "--", "touch", ran)
			if r.code != ExitCannotExec || !strings.Contains(r.stderr, "--cgroup "+c.dir+" cannot be used") || !strings.Contains(r.stderr, c.want) {
				t.Errorf("fence run --cgroup %s: want exit %d and %q, got %v", c.dir, ExitCannotExec, c.want, r)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Errorf("the command ran although --cgroup %s cannot be used", c.dir)
			}
		})
	}
}

// --cgroup names a cgroup v2 directory this user may not write (the
// hierarchy's root; as root, the test runs fence as nobody): refused, and
// the message says how to delegate it.
func TestRunCgroupFlagRefusesUnwritableDirectory(t *testing.T) {
	root := cgroup2Root(t)
	if root == "" {
		t.Skip("no cgroup v2 hierarchy is mounted here")
	}
	// A directory of the temp root, which nobody can reach (t.TempDir's
	// parent is 0700).
	dir, err := os.MkdirTemp("", "fence-cgroup-test-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := fenceBin
	cmd := exec.Command(bin, "run", "--cgroup", root, "--lease", "cg", "--", "touch", filepath.Join(dir, "ran"))
	if os.Geteuid() == 0 {
		// nobody must be able to run the binary (a copy) and make the
		// database.
		must(t, os.Chmod(dir, 0o777))
		bin = filepath.Join(dir, "fence")
		copyFile(t, fenceBin, bin, 0o755)
		cmd = exec.Command(bin, "run", "--cgroup", root, "--lease", "cg", "--", "touch", filepath.Join(dir, "ran"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	} else if syscall.Access(root, 2) == nil {
		t.Skipf("%s is writable by this user", root)
	}
	cmd.Env = []string{"FENCE_DSN=sqlite:" + filepath.Join(dir, "fence.db"), "PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !asExit(err, &ee) || ee.ExitCode() != ExitCannotExec || !strings.Contains(string(out), "is not writable by uid") ||
		!strings.Contains(string(out), "chown the directory and its cgroup.procs") {
		t.Errorf("fence run --cgroup %s as a user who may not write it: want exit %d and how to delegate it, got %v: %s", root, ExitCannotExec, err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the command ran")
	}
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A fence run killed with kill -9 cannot remove its cgroup; with its shim
// killed at the same moment (no PID namespace) its job runs on in that
// cgroup. The next fence run that makes a cgroup in the same directory
// kills what is left in it and removes it.
func TestRunRemovesLeftoverCgroupOfKilledFence(t *testing.T) {
	root := cgroup2Root(t)
	if root == "" {
		t.Skip("no cgroup v2 hierarchy is mounted here")
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	must(t, err)
	var rel string
	for _, l := range strings.Split(string(own), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			rel = p
		}
	}
	parent := filepath.Join(root, rel, "fence-leftover-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Skipf("cannot make a cgroup for the test (run it as root, or inside a delegated cgroup): %v", err)
	}
	t.Cleanup(func() {
		left, _ := filepath.Glob(filepath.Join(parent, "fence-run-*"))
		for _, d := range left {
			_ = os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
			waitCond(t, "leftover emptied", 10*time.Second, func() bool { return populated(d) == 0 })
			_ = os.Remove(d)
		}
		_ = os.Remove(parent)
	})

	b := sqliteOnly(t)
	b.extra = []string{"FENCE_SUPERVISE_NO_NAMESPACE=1"}
	started := filepath.Join(b.dir, "started")
	p := b.start(t, "run", "--cgroup", parent, "--lease", "leftover", "--ttl", "3s", "--", "sh", "-c",
		"touch "+started+"; exec sleep 1000 </dev/null >/dev/null 2>&1")
	waitFile(t, started, 30*time.Second)
	dirs, _ := filepath.Glob(filepath.Join(parent, "fence-run-"+strconv.Itoa(p.cmd.Process.Pid)+"-*"))
	if len(dirs) != 1 {
		t.Fatalf("fence run %d's cgroup under %s: found %v", p.cmd.Process.Pid, parent, dirs)
	}
	cg := dirs[0]
	shims := childPids(p.cmd.Process.Pid)
	if len(shims) == 0 {
		t.Fatal("fence run has no shim")
	}
	// fence run and its shim at once: nothing is left to clean up.
	_ = syscall.Kill(shims[0], syscall.SIGKILL)
	p.signal(syscall.SIGKILL)
	p.wait(time.Minute)
	if _, err := os.Stat(cg); err != nil {
		t.Fatalf("the killed fence run's cgroup %s is gone before the next start: %v", cg, err)
	}
	if populated(cg) != 1 {
		t.Fatalf("the killed fence run's job is not alive in %s (populated %d): nothing to clean up", cg, populated(cg))
	}

	r := b.fence(t, "run", "--cgroup", parent, "--lease", "next", "--", "true")
	if r.code != 0 {
		t.Fatalf("the next fence run: %v", r)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("the next fence run left the killed one's cgroup %s (populated %d): %v", cg, populated(cg), err)
	}
}

// populated is the cgroup's "populated" key of cgroup.events, -1 if unread.
func populated(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "populated "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return -1
}

// childPids lists pid's children (of every thread).
func childPids(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, tk := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + tk.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}
