package supervise

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SetSubreaper makes the calling process a child subreaper: orphaned
// descendants are reparented to it instead of to init.
func SetSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// procStat is what /proc/PID/stat says about a process.
type procStat struct {
	pid, ppid int
	state     byte
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return procStat{}, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 2 {
		return procStat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, false
	}
	return procStat{pid: pid, ppid: ppid, state: f[0][0]}, true
}

// descendants returns every process below root (not root itself), zombies
// included, by walking /proc.
func descendants(root int) []procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := map[int][]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			kids[st.ppid] = append(kids[st.ppid], st)
		}
	}
	var out []procStat
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range kids[p] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// live says whether a process seen in a walk still runs: not a zombie,
// or a zombie main thread whose process has another thread alive (its
// main thread exited with pthread_exit, or a raw exit): /proc shows such a
// process as state Z, yet it runs.
func (p procStat) live() bool {
	if p.state != 'Z' && p.state != 'X' {
		return true
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(p.pid) + "/task")
	if err != nil {
		return false
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil || tid == p.pid {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/task/" + t.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X' {
			return true
		}
	}
	return false
}

// Descendants returns the pids of the live processes below root (a
// process whose main thread has exited while another runs included).
func Descendants(root int) []int {
	var out []int
	for _, p := range descendants(root) {
		if p.live() {
			out = append(out, p.pid)
		}
	}
	return out
}

// signalExact signals pid only if it is still the process seen in the walk:
// a pidfd pins the process, and its parent is checked after opening it, so
// a pid reused by an unrelated process is never signalled.
func signalExact(p procStat, sig syscall.Signal, inTree map[int]bool) {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		return // gone, or pidfds unsupported: without a pidfd the reuse check is not possible
	}
	defer unix.Close(fd)
	st, ok := readStat(p.pid)
	if !ok || !inTree[st.ppid] {
		return
	}
	_ = unix.PidfdSendSignal(fd, sig, nil, 0)
}

// SignalTree sends sig to every live process below root, once.
func SignalTree(root int, sig syscall.Signal) int {
	ds := descendants(root)
	inTree := map[int]bool{root: true}
	for _, p := range ds {
		inTree[p.pid] = true
	}
	n := 0
	for _, p := range ds {
		if !p.live() {
			continue
		}
		// A signal to the process reaches every thread of it, even when
		// its main thread is gone.
		signalExact(p, sig, inTree)
		n++
	}
	return n
}

// KillTree SIGKILLs every process below root until none is left alive. A
// process that forks between one walk and the kill is found by the next
// walk: its parent is dead or dying, so it is reparented to a subreaper
// inside the tree. Zombies are left to their parents (ReapOrphans). It
// gives up after timeout and returns the pids still alive.
func KillTree(root int, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		if SignalTree(root, syscall.SIGKILL) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return Descendants(root)
		}
		time.Sleep(time.Millisecond)
	}
}

// ReapOrphans collects the zombies that are this process's children, except
// the one another goroutine waits for (except; 0 for none).
func ReapOrphans(except int) {
	self := os.Getpid()
	for _, p := range descendants(self) {
		if p.ppid == self && p.pid != except && (p.state == 'Z' || p.state == 'X') {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(p.pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// StopTree SIGSTOPs every process below root until all of them are stopped
// (or zombies), so that none runs another instruction until SIGCONT or
// SIGKILL. New children of a process being stopped are caught by the next
// walk.
func StopTree(root int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		SignalTree(root, syscall.SIGSTOP)
		running := 0
		for _, p := range descendants(root) {
			if p.state != 'T' && p.state != 't' && p.live() {
				running++
			}
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("supervise: processes still running after SIGSTOP")
		}
		time.Sleep(time.Millisecond)
	}
}
