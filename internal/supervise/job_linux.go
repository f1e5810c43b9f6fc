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
)

// Job is a command started under a shim, seen from the supervisor.
type Job struct {
	Pid       int    // the command's pid
	Mechanism string // "cgroup", "subreaper" or "process-group": what holds its tree

	// SweepOrphans makes Wait kill every descendant of this process: set it
	// only when this process is fence run itself (a subreaper whose only
	// child is the shim), never inside a test binary with children of its
	// own.
	SweepOrphans bool

	shim   *exec.Cmd
	ctl    *os.File
	mu     sync.Mutex
	events chan string
}

// StartError is a command that could not be started; Code is 126 or 127
// as in a shell, or 76 when the deadline had passed before it started.
type StartError struct {
	Code int
	Msg  string
}

func (e *StartError) Error() string { return e.Msg }

// Start starts argv (path is argv[0] resolved) under a shim whose
// dead-man's switch fires at deadline (boot time) unless SetDeadline moves
// it. The shim is fence's own binary run as fence __shim (exe).
func Start(exe, path string, argv, env []string, stdin io.Reader, stdout, stderr io.Writer, deadline time.Duration) (*Job, error) {
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
	args := append([]string{ShimCommand, strconv.FormatInt(int64(deadline), 10), path}, argv...)
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{ctlR, stW} // fds 3 and 4
	// Its own process group: a terminal's ^C or ^Z reaches fence run only,
	// which decides what the job gets.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Only matters when fence's own output is not a file (in-process use):
	// do not wait long for pipes held open by processes that were killed.
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	ctlR.Close()
	stW.Close()
	if err != nil {
		ctlW.Close()
		stR.Close()
		return nil, fmt.Errorf("starting the shim: %w", err)
	}
	j := &Job{shim: cmd, ctl: ctlW, events: make(chan string, 16)}
	go func() {
		defer close(j.events)
		sc := bufio.NewScanner(stR)
		for sc.Scan() {
			j.events <- sc.Text()
		}
		stR.Close()
	}()
	first, ok := <-j.events
	op, rest, _ := strings.Cut(first, " ")
	switch {
	case ok && op == "P":
		pid, mech, _ := strings.Cut(rest, " ")
		j.Pid, _ = strconv.Atoi(pid)
		j.Mechanism = mech
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

// Events are the shim's reports: "E" (the dead-man's switch killed the
// tree), "s"/"c"/"k" (answers to Stop and Continue), "X STATUS" (the
// command's wait status; the rest of the tree is dead). Closed when the
// shim is gone.
func (j *Job) Events() <-chan string { return j.events }

func (j *Job) send(format string, a ...any) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err := fmt.Fprintf(j.ctl, format+"\n", a...)
	return err
}

// SetDeadline moves the dead-man's switch to boot time d.
func (j *Job) SetDeadline(d time.Duration) error { return j.send("D %d", int64(d)) }

// SignalGroup sends sig to the command's process group.
func (j *Job) SignalGroup(sig syscall.Signal) error { return j.send("G %d", int(sig)) }

// SignalAll sends sig to every process of the command's tree.
func (j *Job) SignalAll(sig syscall.Signal) error { return j.send("A %d", int(sig)) }

// Kill SIGKILLs the whole tree.
func (j *Job) Kill() error { return j.send("K") }

// Stop asks the shim to stop the whole tree; the answer is an "s" event.
func (j *Job) Stop() error { return j.send("S") }

// Continue asks the shim to resume the tree, or to kill it if the deadline
// has passed; the answer is a "c" or "k" event.
func (j *Job) Continue() error { return j.send("C") }

// Wait waits for the shim to exit, closes the control pipe and kills
// anything of the tree that was reparented to this process (the shim
// itself was killed, say).
func (j *Job) Wait() error {
	err := j.shim.Wait()
	j.ctl.Close()
	if j.SweepOrphans {
		KillTree(os.Getpid(), killTimeout)
		ReapOrphans(0)
	}
	return err
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
