package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencekit/fence/internal/boottime"
)

// ShimCommand is the hidden first argument that makes the fence binary run
// as the shim: fence __shim DEADLINE PATH ARGV0 ARGS...
const ShimCommand = "__shim"

// File descriptors of the shim's pipes (after stdin, stdout, stderr).
const (
	ctlFD    = 3 // supervisor -> shim: commands
	statusFD = 4 // shim -> supervisor: events
)

// wakeEvery bounds every sleep of the shim: its deadline is on boot time,
// and Go's timers stand still during a suspend.
const wakeEvery = 50 * time.Millisecond

// killTimeout bounds a tree kill that processes keep escaping by forking.
const killTimeout = 10 * time.Second

// Shim is the main function of fence __shim. It starts the command, holds
// the dead-man's switch and reports the command's end; its exit status is
// 0 unless it could not do its job at all.
//
// fence __shim DEADLINE MODE PATH ARGV0 ARGS...: MODE "ns" when it is the
// first process of the command's PID namespace, "tree" otherwise.
// fence __shim probe: exit 0 (Probe starts it to see what the kernel allows).
func Shim(args []string) int {
	if len(args) == 1 && args[0] == "probe" {
		return 0
	}
	// Nothing the command can reach may be load-bearing: the pipes to fence
	// are not inherited by it, and the command (same user) may not trace
	// this process or read or write its memory.
	for _, fd := range []int{ctlFD, statusFD} {
		syscall.CloseOnExec(fd)
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	ctl, status := os.NewFile(ctlFD, "ctl"), os.NewFile(statusFD, "status")
	if len(args) < 4 || ctl == nil || status == nil {
		fmt.Fprintln(os.Stderr, "fence __shim is started by 'fence run', not by hand")
		return 2
	}
	if _, err := ctl.Stat(); err != nil {
		fmt.Fprintln(os.Stderr, "fence __shim is started by 'fence run', not by hand")
		return 2
	}
	deadline, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence __shim: bad deadline")
		return 2
	}
	sh := &shim{deadline: time.Duration(deadline), out: status, ns: args[1] == "ns"}
	return sh.run(ctl, args[2], args[3:])
}

type shim struct {
	deadline time.Duration // boot time after which the tree is killed unless renewed
	out      *os.File
	ns       bool // the first process of the command's PID namespace
	pid      int
	expired  bool
}

func (s *shim) send(format string, a ...any) {
	// A supervisor that is gone cannot read it; nothing else to do.
	_, _ = fmt.Fprintf(s.out, format+"\n", a...)
}

func (s *shim) run(ctl *os.File, path string, argv []string) int {
	if !s.ns {
		_ = SetSubreaper()
	}
	// The command's terminal signals go to fence run, which forwards them;
	// job control of this process would only get in the way. In a PID
	// namespace the command can send this process only the signals it
	// handles: those below, and SIGCHLD.
	signal.Ignore(syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGWINCH)
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	term := make(chan os.Signal, 4)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)

	pa := &os.ProcAttr{Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: &syscall.SysProcAttr{Setpgid: true}}
	if boottime.Now() >= s.deadline {
		s.send("F 76 the lease could lapse before the command started")
		return 0
	}
	p, err := os.StartProcess(path, argv, pa)
	if err != nil {
		code := 126
		if os.IsNotExist(err) {
			code = 127
		}
		s.send("F %d %s", code, oneLine(err.Error()))
		return 0
	}
	s.pid = p.Pid
	_ = p.Release()
	s.send("P %d", s.pid)

	cmds := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			cmds <- sc.Text()
		}
		close(cmds) // EOF: the supervisor is gone
	}()

	var exited bool
	var ws unix.WaitStatus
	for !exited {
		wait := wakeEvery
		if left := s.deadline - boottime.Now(); left < wait {
			wait = max(left, 0)
		}
		t := time.NewTimer(wait)
		select {
		case c, ok := <-cmds:
			if !ok {
				// The supervisor died (kill -9, OOM): nothing may outlive it.
				s.killAll()
				if s.ns {
					return 0 // the kernel kills the rest of the namespace
				}
				cmds = nil
				break
			}
			s.command(c)
		case <-chld:
		case <-term:
			s.killAll()
		case <-t.C:
		}
		t.Stop()
		if !s.expired && boottime.Now() >= s.deadline {
			// The dead-man's switch: the supervisor did not renew in time.
			s.expired = true
			s.killAll()
			s.send("E")
		}
		exited = s.reap(&ws)
	}
	// Whatever the command left behind must not outlive it.
	s.killAll()
	if !s.ns {
		// Proven empty: this subreaper has no child left, so no descendant
		// (every orphan of the tree comes back to it). A process in
		// uninterruptible sleep can outlast SIGKILL for a while; do not
		// wait for it for ever.
		for end := time.Now().Add(killTimeout); !s.noChildren() && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
			s.killAll()
		}
	}
	// In a PID namespace, this process's exit is the proof: the kernel
	// kills and reaps every process of the namespace before it is gone.
	s.send("X %d", uint32(ws))
	return 0
}

// reap collects exited children; true once the command itself is among them.
func (s *shim) reap(ws *unix.WaitStatus) bool {
	done := false
	for {
		var st unix.WaitStatus
		pid, err := unix.Wait4(-1, &st, unix.WNOHANG, nil)
		if err != nil || pid <= 0 {
			return done
		}
		if pid == s.pid {
			*ws, done = st, true
		}
	}
}

// noChildren reaps what has exited and says whether no child is left.
func (s *shim) noChildren() bool {
	for {
		var st unix.WaitStatus
		pid, err := unix.Wait4(-1, &st, unix.WNOHANG, nil)
		if errors.Is(err, unix.ECHILD) {
			return true
		}
		if err != nil || pid <= 0 {
			return false
		}
	}
}

func (s *shim) command(c string) {
	op, arg, _ := strings.Cut(c, " ")
	n, _ := strconv.ParseInt(arg, 10, 64)
	switch op {
	case "D": // a new deadline, proven by a renewal (or brought forward on loss)
		s.deadline = time.Duration(n)
	case "G": // a forwarded signal, to the command's process group
		_ = syscall.Kill(-s.pid, syscall.Signal(n))
	case "A": // a signal to every process of the tree
		s.signalAll(syscall.Signal(n))
	case "K":
		s.killAll()
	case "S":
		s.stop()
		s.send("s")
	case "C":
		if boottime.Now() >= s.deadline {
			// Past the deadline the tree dies stopped: it runs nothing more.
			s.expired = true
			s.killAll()
			s.send("k")
			return
		}
		s.signalAll(syscall.SIGCONT)
		s.send("c")
	}
}

// signalAll sends sig to every process of the tree. In a PID namespace,
// kill(-1) from its first process reaches every other process of it, and
// the kernel passes it to children forked meanwhile too.
func (s *shim) signalAll(sig syscall.Signal) {
	if s.ns {
		_ = syscall.Kill(-1, sig)
		return
	}
	SignalTree(os.Getpid(), sig)
}

func (s *shim) killAll() {
	if s.ns {
		_ = syscall.Kill(-1, syscall.SIGKILL)
		return
	}
	KillTree(os.Getpid(), killTimeout)
}

// stop SIGSTOPs every process of the tree, so that none of them runs
// another instruction until SIGCONT or a kill. (With a cgroup, fence
// freezes it instead.)
func (s *shim) stop() {
	if s.ns {
		_ = syscall.Kill(-1, syscall.SIGSTOP)
		return
	}
	_ = StopTree(os.Getpid(), 5*time.Second)
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
