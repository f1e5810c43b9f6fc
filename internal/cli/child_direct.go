//go:build unix && !linux

package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/fencekit/fence"
)

// jobControlSignals: without a shim to stop the job first, ^Z is left to
// its default (fence and its command's group are stopped separately).
var jobControlSignals []os.Signal

func prepareProcess() error { return nil }

// containment: only Linux has a shim, namespaces and cgroups.
type containment struct{}

// contain says that only the command's process group is signalled here,
// and refuses to go on with --require-containment.
func (a *app) contain(ctx context.Context, o runOpts, sup *supervisor) error {
	if o.requireContainment {
		return fail(ExitCannotExec, errors.New("refusing to run without real containment (--require-containment): this system has no PID namespaces or cgroups for fence run"), "run fence run on Linux")
	}
	fmt.Fprintln(a.stderr, "fence run: warning: containment is best effort here: only the command's process group is signalled; a descendant that leaves it, or a job that stops or kills fence, runs on unsupervised")
	return nil
}

// job is the fence.Job of fence run: start the command, forward signals,
// and when the context is cancelled (the lease is lost or unproven) stop the
// command's whole process group, SIGKILL no later than just before the lease
// could lapse.
func (s *supervisor) job(ctx context.Context) error {
	tok, _ := fence.TokenFrom(ctx)
	runID, _ := fence.RunIDFrom(ctx)
	if err := s.refuseLate(ctx, tok); err != nil {
		return err
	}
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Env = childEnv(s.env, tok, runID, s.dsn, s.prefix, s.exportDSN)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.stdin, s.stdout, s.stderr
	cmd.SysProcAttr = sysProcAttr()
	// Pdeathsig (Linux) fires when the thread that started the command
	// exits, not the process: keep this goroutine on that thread until the
	// command is gone, so no other goroutine can take the thread and end it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Only matters when fence's own output is not a file (in-process use):
	// do not wait long for pipes held open by processes that we killed.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		s.code = ExitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			s.code = ExitNotFound
		}
		fence.SetExitCode(ctx, s.code)
		return fmt.Errorf("cannot run %q: %v", clip(s.argv[0]), trimExec(err))
	}
	s.started, s.pid = true, cmd.Process.Pid
	s.log.InfoContext(ctx, "fence: command started", "pid", s.pid, "lease", tok.Lease, "fence", tok.Fence, "run", runID)
	group := -s.pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	done := ctx.Done()
	var kill <-chan time.Time
	for {
		select {
		case err := <-waited:
			s.exitedAt = time.Now()
			// Whatever the command left running in its group must not
			// outlive the run (and so the lease).
			_ = syscall.Kill(group, syscall.SIGKILL)
			ce := waitStatus(cmd.ProcessState, err)
			s.code = ce.code
			fence.SetExitCode(ctx, s.code)
			s.log.InfoContext(ctx, "fence: command exited", "pid", s.pid, "status", s.code)
			if s.code != 0 {
				return ce
			}
			return nil
		case sig := <-s.sigs:
			s.log.InfoContext(ctx, "fence: forwarding signal", "signal", sig, "pgid", s.pid)
			_ = syscall.Kill(group, sig.(syscall.Signal))
		case <-done:
			done = nil
			s.markLost(ctx)
			_ = syscall.Kill(group, syscall.SIGTERM)
			t := time.NewTimer(time.Until(s.killAt))
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			s.killed = true
			s.log.WarnContext(ctx, "fence: killing the command", "pid", s.pid)
			_ = syscall.Kill(group, syscall.SIGKILL)
		}
	}
}

// waitStatus turns a finished command into its shell-style exit status.
func waitStatus(ps *os.ProcessState, err error) *childExit {
	if ps == nil {
		return &childExit{code: ExitFailure}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &childExit{code: exitSignalBase + int(ws.Signal()), sig: signalName(ws.Signal())}
	}
	return &childExit{code: ps.ExitCode()}
}

// ShimCommand is the hidden argument of the shim, which only Linux uses.
const ShimCommand = "__shim"

// Shim exists on Linux only.
func Shim([]string) int {
	fmt.Fprintln(os.Stderr, "fence __shim is only used on Linux")
	return 2
}
