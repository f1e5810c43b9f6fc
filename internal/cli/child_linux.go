package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/boottime"
	"github.com/fencekit/fence/internal/supervise"
)

// jobControlSignals are handled by fence run itself: ^Z stops the job's
// whole tree first, then fence; on SIGCONT the job resumes only if its
// lease cannot have lapsed meanwhile.
var jobControlSignals = []os.Signal{syscall.SIGTSTP, syscall.SIGCONT, syscall.SIGTTIN, syscall.SIGTTOU}

// prepareProcess makes fence run a child subreaper, so that a descendant
// of the job that leaves the tree (its shim killed) comes back to it.
func prepareProcess() error { return supervise.SetSubreaper() }

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
	j, err := supervise.Start(s.exe, path, s.argv, childEnv(s.env, tok, runID, s.dsn, s.prefix, s.exportDSN),
		s.stdin, s.stdout, s.stderr, deadline)
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
				// The shim died without reporting (someone killed it): its
				// orphans came to this subreaper; kill them.
				s.exitedAt = time.Now()
				_ = j.Wait()
				s.code = ExitFailure
				fence.SetExitCode(ctx, s.code)
				return errors.New("fence's shim process died; the command's tree was killed")
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
