package supervise

import (
	"bufio"
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
func Shim(args []string) int {
	ctl, status := os.NewFile(ctlFD, "ctl"), os.NewFile(statusFD, "status")
	if len(args) < 3 || ctl == nil || status == nil {
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
	sh := &shim{deadline: time.Duration(deadline), out: status}
	return sh.run(ctl, args[1], args[2:])
}

type shim struct {
	deadline time.Duration // boot time after which the tree is killed unless renewed
	out      *os.File
	cg       *cgroup
	pid      int
	expired  bool
	frozen   bool // stopped by the cgroup freezer (else by SIGSTOP)
}

func (s *shim) send(format string, a ...any) {
	// A supervisor that is gone cannot read it; nothing else to do.
	_, _ = fmt.Fprintf(s.out, format+"\n", a...)
}

func (s *shim) run(ctl *os.File, path string, argv []string) int {
	mech := "subreaper"
	if err := SetSubreaper(); err != nil {
		mech = "process-group"
	}
	// The command's terminal signals go to fence run, which forwards them;
	// job control of this process would only get in the way.
	signal.Ignore(syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	term := make(chan os.Signal, 4)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)

	attr := &syscall.SysProcAttr{Setpgid: true}
	// FENCE_SUPERVISE_NO_CGROUP=1 tests (and lets an operator choose) the
	// fallback of machines without a writable cgroup v2 hierarchy.
	if os.Getenv("FENCE_SUPERVISE_NO_CGROUP") != "1" {
		if cg, err := newCgroup(); err == nil {
			s.cg = cg
			attr.UseCgroupFD, attr.CgroupFD = true, int(cg.fd.Fd())
		}
	}
	pa := &os.ProcAttr{Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: attr}
	if boottime.Now() >= s.deadline {
		s.send("F 76 the lease could lapse before the command started")
		s.cleanup()
		return 0
	}
	p, err := os.StartProcess(path, argv, pa)
	if err != nil && s.cg != nil {
		// clone3 into a cgroup can be refused (seccomp, old kernel): go on
		// without it.
		s.cg.remove(time.Second)
		s.cg, attr.UseCgroupFD = nil, false
		p, err = os.StartProcess(path, argv, pa)
	}
	if err != nil {
		code := 126
		if os.IsNotExist(err) {
			code = 127
		}
		s.send("F %d %s", code, oneLine(err.Error()))
		return 0
	}
	if s.cg != nil {
		mech = "cgroup"
	}
	s.pid = p.Pid
	_ = p.Release()
	s.send("P %d %s", s.pid, mech)

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
				cmds = nil
				s.killAll()
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
	// A process in uninterruptible sleep can outlast SIGKILL for a while;
	// do not wait for it for ever.
	for end := time.Now().Add(killTimeout); s.reapAny() && time.Now().Before(end); {
	}
	s.cleanup()
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

func (s *shim) reapAny() bool {
	var st unix.WaitStatus
	pid, err := unix.Wait4(-1, &st, unix.WNOHANG, nil)
	if err == nil && pid > 0 {
		return true
	}
	// Children still alive that are not zombies yet: wait for them briefly.
	if len(Descendants(os.Getpid())) > 0 {
		time.Sleep(time.Millisecond)
		s.killAll()
		return true
	}
	return false
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
		SignalTree(os.Getpid(), syscall.Signal(n))
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
		s.cont()
		s.send("c")
	}
}

func (s *shim) killAll() {
	if s.cg != nil {
		_ = s.cg.kill()
	}
	KillTree(os.Getpid(), killTimeout)
}

// stop freezes the cgroup, or SIGSTOPs every process of the tree, so that
// none of them runs another instruction until cont or a kill.
func (s *shim) stop() {
	if s.cg != nil && s.cg.freeze(true, 5*time.Second) == nil {
		s.frozen = true
		return
	}
	_ = StopTree(os.Getpid(), 5*time.Second)
}

func (s *shim) cont() {
	if s.frozen {
		s.frozen = false
		_ = s.cg.freeze(false, 0)
		return
	}
	SignalTree(os.Getpid(), syscall.SIGCONT)
}

func (s *shim) cleanup() {
	if s.cg != nil {
		_ = s.cg.remove(killTimeout)
		s.cg = nil
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
