package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fence"
)

// supervisor runs fence run's command as the runner's Job and stops it when
// the lease is lost. Its report fields are written by the job and read after
// fence.Run has returned.
type supervisor struct {
	argv           []string
	env            []string
	dsn, prefix    string
	stdin          io.Reader
	stdout, stderr io.Writer
	ttl, grace     time.Duration
	sigs           <-chan os.Signal
	log            *slog.Logger
	exe            string       // fence's own binary, run as the shim
	ownsProcess    bool         // this process is fence run itself, not a test binary
	exportDSN      bool         // --export-dsn: pass FENCE_DSN to the command
	store          *fence.Store // to record how a lost run's command ended
	contain        containment  // what holds the command's tree (Linux)

	started       bool
	refused       string // why the command was not started although the lease was acquired
	pid           int
	mechanism     string // what holds the command's tree: cgroup, subreaper, process-group
	code          int    // exit status, 128+S when killed by signal S
	exit          *childExit
	lostAt        time.Time // when the job's context was cancelled
	killAt        time.Time // when SIGKILL was due
	capped        bool      // killAt was brought forward to before the lease could lapse
	termed        bool      // SIGTERM was sent to the tree
	killed        bool      // SIGKILL was sent before the command exited
	switchFired   bool      // the shim's dead-man's switch killed the tree
	armedKill     bool      // fence moved the shim's deadline to the SIGKILL time after the loss
	killedStopped bool      // stopped by ^Z, then killed on SIGCONT without resuming
	stoppedAt     time.Time
	exitedAt      time.Time
}

// refuseLate refuses to start the command when the acquire took so long
// that the lease cannot be proven for a useful while (a third of the TTL
// before the renew deadline): the command would be stopped as soon as it
// started, or run on a lease that may already be someone else's.
func (s *supervisor) refuseLate(ctx context.Context, tok fence.Token) error {
	lapse, ok := fence.LapseTime(ctx)
	if !ok {
		return nil
	}
	left := time.Until(lapse)
	if ctx.Err() == nil && left-(s.ttl-s.ttl*2/3) >= s.ttl/3 {
		return nil
	}
	s.refused = fmt.Sprintf("acquiring fence %d took %s of the %s TTL, too long to prove the lease for a useful while; the command was not started",
		tok.Fence, human(max(s.ttl-left, 0)), human(s.ttl))
	s.code = ExitLost
	return errors.New(s.refused)
}

// childEnv is env without any FENCE_* variables of ours, plus this run's.
// FENCE_DSN (which may carry a password) is passed only with --export-dsn;
// one in fence's own environment is removed otherwise, so that the command
// and everything it starts cannot read it from /proc/PID/environ.
func childEnv(env []string, t fence.Token, runID int64, dsn, prefix string, exportDSN bool) []string {
	ours := map[string]string{
		"FENCE_LEASE":  t.Lease,
		"FENCE_OWNER":  t.Owner,
		"FENCE_TOKEN":  strconv.FormatInt(t.Fence, 10),
		"FENCE_RUN_ID": strconv.FormatInt(runID, 10),
		"FENCE_DSN":    dsn,
		"FENCE_PREFIX": prefix,
	}
	out := make([]string, 0, len(env)+len(ours))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := ours[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range []string{"FENCE_LEASE", "FENCE_OWNER", "FENCE_TOKEN", "FENCE_RUN_ID", "FENCE_DSN", "FENCE_PREFIX"} {
		if k == "FENCE_DSN" && !exportDSN {
			continue
		}
		out = append(out, k+"="+ours[k])
	}
	return out
}

// markLost records the loss and when SIGKILL is due: after --grace, but
// never later than just before the lease could lapse.
func (s *supervisor) markLost(ctx context.Context) {
	s.lostAt = time.Now()
	s.killAt = s.lostAt.Add(s.grace)
	if lapse, ok := fence.LapseTime(ctx); ok {
		if latest := lapse.Add(-lapseMargin(s.ttl)); latest.Before(s.killAt) {
			s.killAt, s.capped = latest, true
		}
	}
	s.log.WarnContext(ctx, "fence: lease lost, stopping the command", "pid", s.pid,
		"cause", context.Cause(ctx), "sigkill_in", max(time.Until(s.killAt), 0))
}

// stopReport says how the command was stopped after the lease was lost.
func (s *supervisor) stopReport() string {
	tree := "the command"
	if s.mechanism != "" {
		tree = "the command's process tree (" + s.mechanism + ")"
	}
	switch {
	case !s.started:
		return "the command was not started"
	case s.killedStopped:
		return fmt.Sprintf("%s was stopped with fence (SIGTSTP) and, as the lease could have lapsed while it was stopped, killed with SIGKILL without running again (status %d)", tree, s.code)
	case s.switchFired && s.armedKill:
		// fence knew of the loss and had moved the shim's deadline to the
		// SIGKILL time itself: nothing suggests fence was stopped.
		return fmt.Sprintf("fence's shim killed %s with SIGKILL at the deadline fence had set for it after the loss (status %d)", tree, s.code)
	case s.switchFired:
		return fmt.Sprintf("fence's shim killed %s with SIGKILL when the lease's deadline passed with no renewal from fence (was fence stopped?) (status %d)", tree, s.code)
	case s.lostAt.IsZero() || s.exitedAt.Before(s.lostAt):
		return fmt.Sprintf("the command had exited (status %d)", s.code)
	case s.killed:
		why := "--grace"
		if s.capped {
			why = "before the lease could lapse"
		}
		return fmt.Sprintf("stopped %s: SIGTERM, then SIGKILL after %s (%s; status %d)", tree, human(max(s.killAt.Sub(s.lostAt), 0)), why, s.code)
	}
	return fmt.Sprintf("stopped %s: SIGTERM; it exited after %s (status %d)", tree, human(s.exitedAt.Sub(s.lostAt)), s.code)
}

// childExit is the job's error when the command exits non-zero.
type childExit struct {
	code int
	sig  string // signal name when killed by a signal
}

func (e *childExit) Error() string {
	if e.sig != "" {
		return fmt.Sprintf("command killed by signal %s (exit status %d)", e.sig, e.code)
	}
	return fmt.Sprintf("command exited with status %d", e.code)
}
