package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencekit/fence/internal/boottime"
)

// KillBound is how long after fence decides to kill the tree (a revoke's
// SIGKILL time, the death or stop of the shim) the tree is dead at the
// latest, on a machine that schedules fence at all: fence writes
// cgroup.kill itself, and SIGKILLs the shim (in a PID namespace the kernel
// then kills every process of it) when the shim has not ended the tree by
// then. cmd/fence/README.md documents it.
const KillBound = time.Second

// shimKillAfter is how long fence lets the shim end the tree itself (and
// report the command's exit status) before it SIGKILLs the shim.
const shimKillAfter = 300 * time.Millisecond

// watchEvery is how often fence checks that its shim is not stopped.
const watchEvery = 50 * time.Millisecond

// Options says how to start a command under a shim.
type Options struct {
	Exe            string   // fence's own binary, run as fence __shim
	Path           string   // argv[0] resolved
	Argv, Env      []string // the command and its environment
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Deadline       time.Duration // boot time at which the dead-man's switch fires unless moved
	Containment    Containment   // from Probe
}

// Job is a command started under a shim, seen from the supervisor.
type Job struct {
	Pid       int    // the command's pid (as this process sees it)
	Mechanism string // what holds its tree: pid-namespace+cgroup, pid-namespace, cgroup, subreaper

	// SweepOrphans makes Wait kill every descendant of this process: set it
	// only when this process is fence run itself (a subreaper whose only
	// child is the shim), never inside a test binary with children of its
	// own.
	SweepOrphans bool

	shim    *exec.Cmd
	ns      bool
	cg      *cgroup
	ctl     *os.File
	mu      sync.Mutex
	events  chan string
	local   chan string // events fence makes itself (freeze, tamper)
	frozen  bool
	dead    chan struct{} // closed when the shim has exited
	waitErr error
	once    sync.Once
	tamper  string // why fence killed the tree without the shim

	lastDeadline time.Duration // the last deadline given to the shim
}

// StartError is a command that could not be started; Code is 126 or 127
// as in a shell, or 76 when the deadline had passed before it started.
type StartError struct {
	Code int
	Msg  string
}

func (e *StartError) Error() string { return e.Msg }

// Start starts the command under a shim whose dead-man's switch fires at
// o.Deadline (boot time) unless SetDeadline moves it. Where o.Containment
// allows, the shim is the first process of a new PID namespace (and cgroup
// namespace), in a cgroup that this process made and kills itself: the
// command can then neither see nor signal fence or the shim, nor leave.
func Start(o Options) (*Job, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	defer ctlR.Close()
	defer stW.Close()
	c := o.Containment
	var cg *cgroup
	if c.Cgroup {
		if cg, err = newCgroup(c.CgroupParent); err != nil {
			cg = nil
		}
	}
	var cmd *exec.Cmd
	ns := c.Namespace
	for {
		mode := "tree"
		if ns {
			mode = "ns"
		}
		args := append([]string{ShimCommand, strconv.FormatInt(int64(o.Deadline), 10), mode, o.Path}, o.Argv...)
		cmd = exec.Command(o.Exe, args...)
		cmd.Env = o.Env
		cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
		cmd.ExtraFiles = []*os.File{ctlR, stW} // fds 3 and 4; the shim closes them on exec
		// Its own process group: a terminal's ^C or ^Z reaches fence run
		// only, which decides what the job gets.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if ns {
			nsAttr(cmd.SysProcAttr)
		}
		if cg != nil {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.fd.Fd())
		}
		// Only matters when fence's own output is not a file (in-process
		// use): do not wait long for pipes held open by killed processes.
		cmd.WaitDelay = time.Second
		err = startDumpable(cmd, ns && os.Geteuid() != 0)
		if err == nil || (!ns && cg == nil) || c.Require {
			break
		}
		// The kernel refused a namespace or the cgroup after all (seccomp,
		// a policy): fall back, as Probe would have said.
		switch {
		case cg != nil:
			_ = cg.remove(time.Second)
			cg = nil
		default:
			ns = false
		}
	}
	if err != nil {
		ctlW.Close()
		stR.Close()
		if cg != nil {
			_ = cg.remove(time.Second)
		}
		return nil, fmt.Errorf("starting the shim: %w", err)
	}
	j := &Job{shim: cmd, ns: ns, cg: cg, ctl: ctlW, events: make(chan string, 16), local: make(chan string, 4),
		dead: make(chan struct{}), lastDeadline: o.Deadline}
	j.Mechanism = mechanism(ns, cg != nil)
	go j.read(stR)
	go j.watch()
	first, ok := <-j.events
	op, rest, _ := strings.Cut(first, " ")
	switch {
	case ok && op == "P":
		j.Pid, _ = strconv.Atoi(rest)
		if ns {
			j.Pid = firstChild(cmd.Process.Pid)
		}
		return j, nil
	case ok && op == "F":
		code, msg, _ := strings.Cut(rest, " ")
		n, _ := strconv.Atoi(code)
		_ = j.Wait()
		return nil, &StartError{Code: n, Msg: msg}
	}
	err = j.Wait()
	return nil, fmt.Errorf("the shim (fence %s) ended before starting the command: %v", ShimCommand, err)
}

func mechanism(ns, cg bool) string {
	switch {
	case ns && cg:
		return "pid-namespace+cgroup"
	case ns:
		return "pid-namespace"
	case cg:
		return "cgroup"
	}
	return "subreaper"
}

// read passes the shim's reports and fence's own on as Events; the channel
// closes when the shim's status pipe does (it is gone: no other process
// holds that pipe).
func (j *Job) read(r *os.File) {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
		r.Close()
	}()
	defer close(j.events)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				// What fence said before the shim died comes first.
				for {
					select {
					case l := <-j.local:
						j.events <- l
					default:
						return
					}
				}
			}
			j.events <- l
		case l := <-j.local:
			j.events <- l
		}
	}
}

// watch is fence's eye on its shim: if the shim is stopped (SIGSTOP from
// outside its namespace, or from the command where there is none), fence
// kills the tree itself at once. The shim's death is seen by Wait and by
// the end of Events.
func (j *Job) watch() {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	go func() {
		j.waitErr = j.shim.Wait()
		close(j.dead)
	}()
	for {
		select {
		case <-j.dead:
			return
		case <-t.C:
			st, ok := readStat(j.shim.Process.Pid)
			if ok && (st.state == 'T' || st.state == 't') && !j.isFrozen() {
				j.killHard("fence's shim was stopped (SIGSTOP)")
				return
			}
		}
	}
}

func (j *Job) isFrozen() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.frozen
}

// killHard kills the tree without the shim's help: cgroup.kill, then
// SIGKILL of the shim (which, as the first process of the command's PID
// namespace, takes every process of it along; without one, its orphans
// come to this subreaper and Wait kills them).
func (j *Job) killHard(why string) {
	j.mu.Lock()
	if j.tamper == "" {
		j.tamper = why
	}
	j.mu.Unlock()
	if j.cg != nil {
		_ = j.cg.kill()
	}
	_ = j.shim.Process.Kill()
	select {
	case j.local <- "T":
	default:
	}
}

// Tampered says why fence killed the tree itself, if it did.
func (j *Job) Tampered() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.tamper
}

// Events are the shim's reports: "E" (the dead-man's switch killed the
// tree), "s"/"c"/"k" (answers to Stop and Continue), "T" (fence killed the
// tree itself: see Tampered), "X STATUS" (the command's wait status; the
// rest of the tree is being killed). Closed when the shim is gone.
func (j *Job) Events() <-chan string { return j.events }

func (j *Job) send(format string, a ...any) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	// A shim that does not read (stopped, stuck) must not stop fence.
	_ = j.ctl.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := fmt.Fprintf(j.ctl, format+"\n", a...)
	return err
}

// SetDeadline moves the dead-man's switch to boot time d.
func (j *Job) SetDeadline(d time.Duration) error {
	j.mu.Lock()
	j.lastDeadline = d
	j.mu.Unlock()
	return j.send("D %d", int64(d))
}

// SignalGroup sends sig to the command's process group.
func (j *Job) SignalGroup(sig syscall.Signal) error { return j.send("G %d", int(sig)) }

// SignalAll sends sig to every process of the command's tree.
func (j *Job) SignalAll(sig syscall.Signal) error { return j.send("A %d", int(sig)) }

// Kill SIGKILLs the whole tree: fence asks the shim to kill it and report
// the command's status; when the shim has not ended within shimKillAfter,
// fence writes cgroup.kill and SIGKILLs the shim itself.
func (j *Job) Kill() error {
	// Not cgroup.kill first: the shim is in the cgroup, and would die
	// before reporting the command's status.
	err := j.send("K")
	go func() {
		select {
		case <-j.dead:
		case <-time.After(shimKillAfter):
			j.killHard("fence's shim did not end the tree in time")
		}
	}()
	return err
}

// Stop stops the whole tree; the answer is an "s" event. With a cgroup
// fence freezes it itself (the shim with it).
func (j *Job) Stop() error {
	if j.cg != nil && j.cg.freeze(true, 5*time.Second) == nil {
		j.mu.Lock()
		j.frozen = true
		j.mu.Unlock()
		j.local <- "s"
		return nil
	}
	return j.send("S")
}

// Continue resumes the tree, or kills it if the deadline has passed; the
// answer is a "c" or "k" event.
func (j *Job) Continue() error {
	j.mu.Lock()
	frozen := j.frozen
	j.frozen = false
	j.mu.Unlock()
	if !frozen {
		return j.send("C")
	}
	// Frozen, the shim cannot have moved its deadline: fence holds the
	// same deadline and decides.
	if boottime.Now() >= j.deadline() {
		// Killed frozen, it runs nothing more; SIGKILL is its status.
		j.local <- "k"
		j.local <- fmt.Sprintf("X %d", uint32(syscall.SIGKILL))
		_ = j.cg.kill()
		_ = j.cg.freeze(false, 0)
		return nil
	}
	_ = j.cg.freeze(false, 0)
	j.local <- "c"
	return nil
}

// deadline is the last deadline fence gave the shim.
func (j *Job) deadline() time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lastDeadline
}

// Wait waits for the shim to exit and for the tree to be proven empty:
// in a PID namespace by the shim's exit (the kernel kills and reaps every
// process of the namespace before its first process is gone), with a
// cgroup by cgroup.events reporting no process; otherwise, with
// SweepOrphans, by killing what was reparented to this subreaper.
func (j *Job) Wait() error {
	j.once.Do(func() {
		<-j.dead
		j.ctl.Close()
		if j.cg != nil {
			if err := j.cg.remove(killTimeout); err != nil {
				j.waitErr = err // not proven empty: that is what matters
			}
		}
		if j.SweepOrphans {
			KillTree(os.Getpid(), killTimeout)
			ReapOrphans(0)
		}
	})
	return j.waitErr
}

// ShimPid is the shim's pid.
func (j *Job) ShimPid() int { return j.shim.Process.Pid }

// ParseStatus decodes an "X STATUS" event.
func ParseStatus(ev string) (syscall.WaitStatus, error) {
	s, ok := strings.CutPrefix(ev, "X ")
	if !ok {
		return 0, errors.New("not an exit event")
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return syscall.WaitStatus(n), err
}

// firstChild is pid's first child as this process sees it (the command,
// when pid is a shim in a PID namespace), or 0 when it has none (any
// more). Every thread's children are read: the shim is a Go program, and
// the thread that forked the command need not be its main one.
func firstChild(pid int) int {
	for range 100 {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, tk := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, tk.Name()))
			if f := strings.Fields(string(b)); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
		time.Sleep(time.Millisecond)
	}
	return 0
}

// startDumpable starts cmd; with userns, fence is made dumpable for the
// moment of the clone: the parent writes the child's uid_map, which /proc
// gives to root alone while the child still has fence's non-dumpable
// memory. The command has not started yet meanwhile.
func startDumpable(cmd *exec.Cmd, userns bool) error {
	if !userns {
		return cmd.Start()
	}
	was, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if was == 0 {
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
		defer unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	}
	return cmd.Start()
}
