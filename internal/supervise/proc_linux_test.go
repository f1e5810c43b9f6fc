package supervise

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A subreaper finds the descendant that a killed child had put in a
// session of its own, and KillTree kills it.
func TestSubreaperKeepsOrphansFindable(t *testing.T) {
	if err := SetSubreaper(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "setsid sleep 1200 & echo started; wait")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	// findSleep returns the grandchild once it runs sleep: "started" is
	// printed when the shell has forked it, which on a loaded machine can be
	// well before the fork has exec'd setsid and sleep. Killing the shell
	// before then left a grandchild still named sh or setsid.
	findSleep := func() (pid, ppid int) {
		for _, p := range descendants(self) {
			if st, _ := os.ReadFile("/proc/" + itoa(p.pid) + "/cmdline"); strings.HasPrefix(string(st), "sleep\x001200") {
				return p.pid, p.ppid
			}
		}
		return 0, 0
	}
	deadline := time.Now().Add(30 * time.Second)
	for pid, _ := findSleep(); pid == 0 && time.Now().Before(deadline); pid, _ = findSleep() {
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// The shell is gone; its setsid child is now this process's.
	orphan, parent := findSleep()
	if orphan != 0 && parent != self {
		t.Errorf("the orphan's parent is %d, want this subreaper %d", parent, self)
	}
	if orphan == 0 {
		t.Fatal("the setsid grandchild was not found below this process")
	}
	if left := KillTree(self, 10*time.Second); len(left) > 0 {
		t.Fatalf("still alive: %v", left)
	}
	ReapOrphans(0)
	if err := syscall.Kill(orphan, 0); err == nil {
		t.Errorf("the orphan %d is still there (not reaped)", orphan)
	}
}

func TestReadStatOddName(t *testing.T) {
	// comm may hold spaces and ')': the state and ppid follow the last ')'.
	cmd := exec.Command("sh", "-c", "exec -a 'x) (y' sleep 5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	st, ok := readStat(cmd.Process.Pid)
	if !ok || st.ppid != os.Getpid() {
		t.Errorf("readStat: %+v %v", st, ok)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
