package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/boottime"
	"github.com/fencekit/fence/internal/supervise"
)

// jobControlSignals are handled by fence run itself: ^Z stops the job's
// whole tree first, then fence; on SIGCONT the job resumes only if its
// lease cannot have lapsed meanwhile.
var jobControlSignals = []os.Signal{syscall.SIGTSTP, syscall.SIGCONT, syscall.SIGTTIN, syscall.SIGTTOU}

// prepareProcess makes fence run a child subreaper, so that a descendant
// of the job that leaves the tree (its shim killed) comes back to it, and
// not dumpable: the job, running as the same user, may not trace fence or
// read or write its memory through /proc.
func prepareProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return err
	}
	return supervise.SetSubreaper()
}

// containment is what holds the job's tree here (supervise.Probe).
type containment = supervise.Containment

// contain finds the containment this machine gives the job, before the
// lease is acquired: it says plainly when it is best effort (and which
// escapes remain), and refuses to go on with --require-containment.
func (a *app) contain(ctx context.Context, o runOpts, sup *supervisor) error {
	c := supervise.Probe(supervise.ProbeOptions{
		Exe: sup.exe, CgroupParent: o.cgroup, Require: o.requireContainment,
		NoNamespace: a.getenv("FENCE_SUPERVISE_NO_NAMESPACE") == "1",
		NoCgroup:    a.getenv("FENCE_SUPERVISE_NO_CGROUP") == "1",
	})
	sup.contain = c
	a.log.InfoContext(ctx, "fence: containment", "tree", c.Mechanism(), "real", c.Real())
	if o.cgroup != "" && c.CgroupErr != nil {
		// The operator asked for this cgroup: running without it would be
		// a weaker containment than asked for, said only in a log line.
		return fail(ExitCannotExec, fmt.Errorf("--cgroup %s cannot be used: %v", o.cgroup, c.CgroupErr),
			"name a cgroup v2 directory this user may write, with fence running inside it or below a common ancestor it may write")
	}
	if c.Real() {
		return nil
	}
	if o.requireContainment {
		return fail(ExitCannotExec, fmt.Errorf("refusing to run %q without real containment (--require-containment): %s", clip(o.argv[0]), strings.Join(c.Missing, "; ")),
			"run fence as root, or allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0)")
	}
	fmt.Fprintln(a.stderr, "fence run: warning: "+c.Warning())
	return nil
}

// bootDeadline is the boot time at which the job must be dead at the latest:
// the lease's lapse time less the margin.
func (s *supervisor) bootDeadline(ctx context.Context) time.Duration {
	lapse, _ := fence.LapseTime(ctx)
	return boottime.Now() + time.Until(lapse) - lapseMargin(s.ttl)
}

// job is the fence.Job of fence run on Linux: start the command under the
// shim (fence __shim), feed the shim's dead-man's switch with each proven
// deadline, forward signals, and when the context is cancelled (the lease
// is lost or unproven) SIGTERM every process of the tree at once and
// SIGKILL it no later than just before the lease could lapse.
func (s *supervisor) job(ctx context.Context) error {
	tok, _ := fence.TokenFrom(ctx)
	runID, _ := fence.RunIDFrom(ctx)
	if err := s.refuseLate(ctx, tok); err != nil {
		return err
	}
	path, err := exec.LookPath(s.argv[0])
	if err != nil {
		return s.cannotStart(ctx, ExitNotFound, trimExec(err))
	}
	deadline := s.bootDeadline(ctx)
	j, err := supervise.Start(supervise.Options{
		Exe: s.exe, Path: path, Argv: s.argv, Env: childEnv(s.env, tok, runID, s.dsn, s.prefix, s.exportDSN),
		Stdin: s.stdin, Stdout: s.stdout, Stderr: s.stderr, Deadline: deadline, Containment: s.contain,
	})
	var se *supervise.StartError
	switch {
	case errors.As(err, &se) && se.Code == ExitLost:
		s.refused = "the lease could lapse before the command started"
		s.code = ExitLost
		return errors.New(s.refused)
	case errors.As(err, &se):
		return s.cannotStart(ctx, se.Code, se.Msg)
	case err != nil:
		return s.cannotStart(ctx, ExitCannotExec, err.Error())
	}
	j.SweepOrphans = s.ownsProcess
	s.started, s.pid, s.mechanism = true, j.Pid, j.Mechanism
	s.log.InfoContext(ctx, "fence: command started", "pid", s.pid, "lease", tok.Lease, "fence", tok.Fence, "run", runID,
		"tree", j.Mechanism, "shim", j.ShimPid())

	tick := time.NewTicker(min(s.ttl/20, 100*time.Millisecond))
	defer tick.Stop()
	done := ctx.Done()
	var kill <-chan time.Time
	for {
		select {
		case ev, ok := <-j.Events():
			if !ok {
				// The shim died without reporting (someone killed it, or fence
				// did, having found it stopped): Wait kills what is left and
				// proves the tree empty.
				s.exitedAt = time.Now()
				werr := j.Wait()
				s.code = ExitFailure
				fence.SetExitCode(ctx, s.code)
				why := "fence's shim process died"
				if t := j.Tampered(); t != "" {
					why = t
				}
				s.log.WarnContext(ctx, "fence: "+why+"; the command's tree was killed", "pid", s.pid)
				var ee *exec.ExitError
				if werr != nil && !errors.As(werr, &ee) {
					return fmt.Errorf("%s; killing the command's tree: %w", why, werr)
				}
				return errors.New(why + "; the command's tree was killed")
			}
			if s.event(ctx, ev) {
				_ = j.Wait()
				return s.finish(ctx, tok, runID)
			}
		case sig := <-s.sigs:
			switch sig {
			case syscall.SIGTSTP:
				if s.suspend(ctx, j) {
					_ = j.Wait()
					return s.finish(ctx, tok, runID)
				}
			case syscall.SIGCONT, syscall.SIGTTIN, syscall.SIGTTOU:
			default:
				s.log.InfoContext(ctx, "fence: forwarding signal", "signal", sig, "pgid", s.pid)
				_ = j.SignalGroup(sig.(syscall.Signal))
			}
		case <-tick.C:
			if done != nil {
				// Each proven lapse time moves the dead-man's switch.
				if d := s.bootDeadline(ctx); d != deadline {
					deadline = d
					_ = j.SetDeadline(d)
				}
			}
		case <-done:
			done = nil
			s.markLost(ctx)
			_ = j.SignalAll(syscall.SIGTERM)
			s.termed = true
			// The shim kills at this deadline even if fence is stopped now.
			_ = j.SetDeadline(boottime.Now() + time.Until(s.killAt))
			s.armedKill = true
			t := time.NewTimer(time.Until(s.killAt))
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			s.killed = true
			s.log.WarnContext(ctx, "fence: killing the command", "pid", s.pid)
			_ = j.Kill()
		}
	}
}

// event handles one report of the shim; true when the command has ended
// (and with it the whole tree).
func (s *supervisor) event(ctx context.Context, ev string) bool {
	switch {
	case ev == "T":
		s.log.WarnContext(ctx, "fence: killing the command's tree itself", "pid", s.pid, "why", "the shim was stopped or did not end it")
	case ev == "E":
		s.switchFired = true
		s.log.WarnContext(ctx, "fence: the shim killed the command: its deadline passed unrenewed", "pid", s.pid)
	case len(ev) > 2 && ev[0] == 'X':
		s.exitedAt = time.Now()
		ws, err := supervise.ParseStatus(ev)
		s.exit = &childExit{code: ExitFailure}
		if err == nil {
			s.exit = fromWaitStatus(ws)
		}
		return true
	}
	return false
}

// suspend is ^Z: stop the job's tree, then fence; on SIGCONT resume the
// tree, unless the lease could have lapsed meanwhile: then the shim kills
// it still stopped. True when the command has ended meanwhile.
func (s *supervisor) suspend(ctx context.Context, j *supervise.Job) bool {
	_ = j.Stop()
	if ended, _ := s.await(ctx, j, "s"); ended {
		return true
	}
	s.log.InfoContext(ctx, "fence: command stopped; stopping fence", "pid", s.pid)
	s.stoppedAt = time.Now()
	// kill(self, SIGSTOP) may return before this process is stopped: the
	// tree may only be continued after the SIGCONT that ends the stop. A
	// SIGCONT already queued is from before and does not count.
	for drained := false; !drained; {
		select {
		case sig := <-s.sigs:
			s.forwardWhileStopped(ctx, j, sig)
		default:
			drained = true
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	for sig := range s.sigs {
		if sig == syscall.SIGCONT {
			break
		}
		s.forwardWhileStopped(ctx, j, sig)
	}
	// Resumed. The shim decides on its deadline, on boot time.
	_ = j.Continue()
	ended, ans := s.await(ctx, j, "c", "k")
	if ans == "k" {
		s.killedStopped = true
		s.log.WarnContext(ctx, "fence: the lease could have lapsed while stopped: the command was killed without resuming", "pid", s.pid)
	}
	return ended
}

// forwardWhileStopped passes on a signal that arrives around a stop: the
// tree gets it when it resumes (or never, if it is killed stopped).
func (s *supervisor) forwardWhileStopped(ctx context.Context, j *supervise.Job, sig os.Signal) {
	if isJobControl(sig) {
		return
	}
	s.log.InfoContext(ctx, "fence: forwarding signal", "signal", sig, "pgid", s.pid)
	_ = j.SignalGroup(sig.(syscall.Signal))
}

// await waits for one of the answers from the shim, handling the other
// events meanwhile; ended reports that the command ended.
func (s *supervisor) await(ctx context.Context, j *supervise.Job, want ...string) (ended bool, got string) {
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-j.Events():
			if !ok {
				return true, ""
			}
			for _, w := range want {
				if ev == w {
					return false, ev
				}
			}
			if s.event(ctx, ev) {
				return true, ""
			}
		case <-t.C:
			return false, ""
		}
	}
}

// finish records how the command ended.
func (s *supervisor) finish(ctx context.Context, tok fence.Token, runID int64) error {
	ce := s.exit
	if ce == nil {
		ce = &childExit{code: ExitFailure}
	}
	s.code = ce.code
	fence.SetExitCode(ctx, s.code)
	s.log.InfoContext(ctx, "fence: command exited", "pid", s.pid, "status", s.code)
	if cause := context.Cause(ctx); cause != nil && s.store != nil {
		// The runner marks a lost run with the cause alone; the run should
		// also say how its command ended (the exit status column is only
		// written by a fenced completion, which a lost run cannot make).
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = s.store.MarkRunLost(mctx, runID, tok.Fence, cause.Error()+"; "+s.stopReport())
		cancel()
	}
	if s.code != 0 {
		return ce
	}
	return nil
}

func (s *supervisor) cannotStart(ctx context.Context, code int, msg string) error {
	s.code = code
	fence.SetExitCode(ctx, s.code)
	return fmt.Errorf("cannot run %q: %s", clip(s.argv[0]), msg)
}

func fromWaitStatus(ws syscall.WaitStatus) *childExit {
	if ws.Signaled() {
		return &childExit{code: exitSignalBase + int(ws.Signal()), sig: signalName(ws.Signal())}
	}
	return &childExit{code: ws.ExitStatus()}
}

// ShimCommand is the hidden first argument that runs the fence binary as
// the shim of fence run's command.
const ShimCommand = supervise.ShimCommand

// Shim is the main function of fence __shim.
func Shim(args []string) int { return supervise.Shim(args) }
