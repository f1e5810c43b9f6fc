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
	"time"
)

// cgroup is a cgroup v2 directory of our own for the command's tree.
type cgroup struct {
	dir string
	fd  *os.File // the directory, for clone3(CLONE_INTO_CGROUP)
}

// newCgroup creates a child of this process's own cgroup v2 group, or says
// why it cannot (no cgroup2 mount, not writable, no cgroup.kill).
func newCgroup() (*cgroup, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var own string
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return nil, errors.New("this process is in no cgroup v2 group")
	}
	dir := filepath.Join(mnt, filepath.Clean("/"+own), fmt.Sprintf("fence-run-%d-%x", os.Getpid(), rand.Uint32()))
	if err := os.Mkdir(dir, 0o755); err != nil {
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

// remove kills what is left and removes the group once it is empty.
func (c *cgroup) remove(timeout time.Duration) error {
	c.fd.Close()
	deadline := time.Now().Add(timeout)
	for {
		_ = c.kill()
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
