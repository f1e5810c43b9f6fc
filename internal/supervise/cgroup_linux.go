package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup is a cgroup v2 directory of our own for the command's tree.
type cgroup struct {
	dir string
	fd  *os.File // the directory, for clone3(CLONE_INTO_CGROUP)
}

// cgroupPrefix starts the name of every cgroup fence run makes; the rest is
// "PID-RANDOM", PID being the fence run that made it.
const cgroupPrefix = "fence-run-"

// newCgroup creates a cgroup for one command under parent (a directory of
// the cgroup v2 hierarchy), or under this process's own cgroup when parent
// is "", or says why it cannot (no cgroup2 mount, not writable, no
// cgroup.kill). Leftovers of fence runs that were killed before they could
// remove theirs are removed first.
func newCgroup(parent string) (*cgroup, error) {
	if parent == "" {
		own, err := ownCgroup()
		if err != nil {
			return nil, err
		}
		parent = own
	} else if err := checkParent(parent); err != nil {
		return nil, err
	}
	cleanLeftovers(parent)
	dir := filepath.Join(parent, fmt.Sprintf("%s%d-%x", cgroupPrefix, os.Getpid(), rand.Uint32()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%s is not writable by uid %d (delegate it: chown the directory and its cgroup.procs, cgroup.threads and cgroup.subtree_control to this user)", parent, os.Geteuid())
		}
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		_ = os.Remove(dir)
		return nil, errors.New("cgroup.kill is missing (Linux before 5.14)")
	}
	fd, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return nil, err
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

// checkParent says why dir cannot hold fence's cgroups, if it cannot: it
// must be a directory of a cgroup v2 hierarchy (not v1, not a plain
// directory).
func checkParent(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%s is not an absolute path", dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		what := "not a cgroup"
		if st.Type == unix.CGROUP_SUPER_MAGIC {
			what = "a cgroup v1 directory"
		}
		return fmt.Errorf("%s is %s, not a cgroup v2 directory (see /proc/self/mountinfo for the cgroup2 mount)", dir, what)
	}
	return nil
}

// ownCgroup is the directory of this process's cgroup v2 group.
func ownCgroup() (string, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return filepath.Join(mnt, filepath.Clean("/"+p)), nil
		}
	}
	return "", errors.New("this process is in no cgroup v2 group")
}

// cleanLeftovers kills and removes the cgroups that fence runs made under
// parent and could not remove because they were killed (kill -9, the OOM
// killer): those whose fence run is gone. A cgroup this user may not
// write is left alone.
func cleanLeftovers(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // its fence run may still be alive
		}
		c := &cgroup{dir: filepath.Join(parent, e.Name())}
		if c.kill() != nil {
			continue
		}
		_ = c.waitEmpty(time.Second)
		_ = os.Remove(c.dir)
	}
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup,
// or /sys/fs/cgroup/unified on a hybrid system).
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 && f[3] == "/" {
			return f[4], nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted")
}

func (c *cgroup) write(file, v string) error {
	return os.WriteFile(filepath.Join(c.dir, file), []byte(v), 0)
}

// kill SIGKILLs every process in the group, atomically with respect to
// fork: a process cannot leave the group by forking.
func (c *cgroup) kill() error { return c.write("cgroup.kill", "1") }

// freeze stops (or thaws) every process in the group and waits until the
// kernel reports the group frozen.
func (c *cgroup) freeze(on bool, timeout time.Duration) error {
	v := "0"
	if on {
		v = "1"
	}
	if err := c.write("cgroup.freeze", v); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for on {
		if c.event("frozen") == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("supervise: cgroup not frozen in time")
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// event reads one key of cgroup.events ("populated", "frozen"); -1 if unknown.
func (c *cgroup) event(key string) int {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok && k == key {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return -1
}

// waitEmpty waits until the kernel reports no process in the group
// (cgroup.events "populated 0"): the proof that nothing of it runs, which
// no walk of /proc can give.
func (c *cgroup) waitEmpty(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		switch c.event("populated") {
		case 0:
			return nil
		case -1:
			if _, err := os.Stat(c.dir); errors.Is(err, os.ErrNotExist) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %v after SIGKILL", c.dir, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// remove kills what is left, waits until the group is proven empty and
// removes it.
func (c *cgroup) remove(timeout time.Duration) error {
	if c.fd != nil {
		c.fd.Close()
	}
	_ = c.kill()
	if err := c.waitEmpty(timeout); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := os.Remove(c.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}
