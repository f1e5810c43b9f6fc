package cli

import (
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

	started  bool
	pid      int
	code     int       // exit status, 128+S when killed by signal S
	lostAt   time.Time // when the job's context was cancelled
	killAt   time.Time // when SIGKILL was due
	capped   bool      // killAt was brought forward to before the lease could lapse
	killed   bool      // SIGKILL was sent before the command exited
	exitedAt time.Time
}

// childEnv is env without any FENCE_* variables of ours, plus this run's.
func childEnv(env []string, t fence.Token, runID int64, dsn, prefix string) []string {
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
		out = append(out, k+"="+ours[k])
	}
	return out
}

// stopReport says how the command was stopped after the lease was lost.
func (s *supervisor) stopReport() string {
	switch {
	case !s.started:
		return "the command was not started"
	case s.lostAt.IsZero() || s.exitedAt.Before(s.lostAt):
		return fmt.Sprintf("the command had exited (status %d)", s.code)
	case s.killed:
		why := "--grace"
		if s.capped {
			why = "before the lease could lapse"
		}
		return fmt.Sprintf("stopped the command: SIGTERM, then SIGKILL after %s (%s)", human(max(s.killAt.Sub(s.lostAt), 0)), why)
	}
	return fmt.Sprintf("stopped the command: SIGTERM; it exited after %s (status %d)", human(s.exitedAt.Sub(s.lostAt)), s.code)
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
