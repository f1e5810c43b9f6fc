package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

const runLong = `Run CMD as a singleton job under lease NAME:

 1. Acquire the lease (with --wait D, keep trying for up to D) and record a
    run in the run ledger, both under the holder name --holder (default
    host:pid of this fence process), which 'fence leases', 'fence runs' and
    a refused 'fence run' show. If the acquire itself took so long (a locked
    table, a slow database) that less than TTL/3 is left before the renew
    deadline, CMD is not started: fence exits 76 and says so.
 2. Start CMD in its own process group with these variables added to the
    environment, so that it can make its own fenced writes:
      FENCE_LEASE   the lease name
      FENCE_OWNER   the owner token of this acquisition
      FENCE_TOKEN   the fence (an integer that only ever increases)
      FENCE_RUN_ID  the run's id in the run ledger
      FENCE_PREFIX  the table prefix
      FENCE_DSN     the database DSN, password included: only with
                    --export-dsn (a FENCE_DSN in fence's own environment is
                    removed from CMD's otherwise)
 3. Renew the lease every TTL/3. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
    fence are forwarded to CMD's process group.
 4. If the lease is lost (taken over, revoked: a refused renewal) or can no
    longer be proven (no renewal succeeded within 2/3 TTL), send SIGTERM at
    once to every process of CMD's tree, then SIGKILL at
    min(now + --grace, lapse - margin): the lapse is the moment the lease
    could lapse (the start of the last successful renewal plus the TTL) and
    the margin is min(TTL/10, 1s). Deadlines are measured on the boot clock
    (CLOCK_BOOTTIME), which keeps counting while the machine is suspended.
 5. When CMD exits, finish the run with fenced completion (recording the exit
    status) and release the lease. Whatever CMD left running is killed then.
    A lost run records how CMD ended (signal, exit status) in its error.

The whole tree (Linux). CMD runs under a small shim, fence's own binary as
'fence __shim', between fence and CMD. Where the kernel allows (root, or
unprivileged user namespaces), the shim is the first process of a new PID
namespace: CMD cannot see or signal fence or the shim, nothing can leave the
namespace, and when the shim ends the kernel kills all of it. With a
writable cgroup v2 directory (fence's own, or --cgroup DIR) fence also makes
a cgroup for it, kills with cgroup.kill and waits for "populated 0".
Without a PID namespace containment is best effort and fence says so at
start (a job that stops or kills fence and its shim both runs on);
--require-containment refuses instead. Either way fence watches its shim and
kills the tree itself within 1s if the shim dies or is stopped; kill -9 of
fence makes the shim kill the tree at once; SIGSTOP of fence: the shim's
dead-man's switch kills it before the lease could lapse; ^Z (SIGTSTP) stops
the tree first. Without a namespace, fence and the shim are child subreapers
(PR_SET_CHILD_SUBREAPER), so that descendants that leave the tree come back
to them. What remains: a frozen or suspended machine runs nothing; a job
that has an unrelated process (a daemon, ssh, at) work for it; a job running
as root. cmd/fence/README.md states the guarantee per mode.

Secrets: a password in --dsn is visible in ps to every user while the job
runs (fence warns); use $FENCE_DSN or --dsn-file FILE instead. fence never
prints the password, and CMD gets it only with --export-dsn.

A fenced completion is refused by the database if a newer owner took the
lease over in the meantime: a fence process that was paused (SIGSTOP, a
stopped VM) notices on resuming, before it commits anything, and exits 76.

CMD runs in its own process group, so, like timeout(1), it cannot read from a
terminal: when fence's stdin is a terminal, CMD's stdin is /dev/null.

Exit status:
  N    CMD's own exit status, when its completion was accepted
       (128+S when CMD was killed by signal S, as in a shell)
  64   usage error: a bad flag or argument
  69   the database is unreachable
  75   the lease was not acquired: another owner holds it (fence says which
       and for how long); with --wait, it was still held after waiting
  76   the lease was lost while CMD ran, CMD's completion was rejected as
       stale (fence says why, e.g. "lease NAME fence 3 superseded by fence
       4"), or the acquire took too long for CMD to be started
  126  CMD could not be executed; 127 CMD was not found
A CMD that itself exits 64, 69, 75 or 76 cannot be told apart by the status
alone: 'fence runs' shows what happened.`

const runExample = `  fence run --lease nightly-report -- ./report.sh --since yesterday

  # Wait up to 5 minutes for the previous run to finish, with a 1 minute TTL:
  fence run --lease reindex --ttl 1m --wait 5m -- ./reindex

  # A Go child makes its own fenced writes with the token fence hands it:
  #   tok := fence.Token{Lease: os.Getenv("FENCE_LEASE"), Owner: os.Getenv("FENCE_OWNER"), Fence: n}
  #   store.Exec(ctx, tok, "UPDATE exports SET done = true WHERE id = ? AND {{fence}}", id)
  FENCE_DSN="$(cat /etc/fence/dsn)" fence run --lease export --export-dsn --grace 30s -- ./export

  # Keep the password out of ps and crontabs:
  fence --dsn-file /etc/fence/dsn run --lease nightly-report -- ./report.sh`

type runOpts struct {
	lease            string
	ttl, wait, grace time.Duration
	argv             []string
	metricsAddr      string
	metricsTokenFile string // bearer token of --metrics-addr
	metricsPush      string // Pushgateway base URL
	metricsTextfile  string // node exporter textfile (*.prom)
	exportDSN        bool
	holder           string
	cgroup           string // --cgroup: a delegated cgroup v2 directory for the command's cgroup
	// --require-containment: refuse to run without a PID namespace.
	requireContainment bool
}

type processKey struct{}

// AsProcess marks ctx as belonging to the fence program itself (not a
// test calling Main): fence run then makes this process a child subreaper
// and kills every process reparented to it when the job ends.
func AsProcess(ctx context.Context) context.Context {
	return context.WithValue(ctx, processKey{}, true)
}

func ownsProcess(ctx context.Context) bool { v, _ := ctx.Value(processKey{}).(bool); return v }

func (a *app) runCmd() *cobra.Command {
	var o runOpts
	cmd := &cobra.Command{
		Use:     "run --lease NAME [--ttl 30s] [--wait 0] [--grace 10s] -- CMD [ARGS...]",
		Short:   "Run a command while holding a lease; its completion is fenced",
		Long:    runLong,
		Example: runExample,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.argv = args
			return a.run(cmd.Context(), o)
		},
	}
	fl := cmd.Flags()
	// Everything from CMD on is CMD's, with or without "--".
	fl.SetInterspersed(false)
	fl.StringVar(&o.lease, "lease", "", "lease `NAME` (required)")
	fl.DurationVar(&o.ttl, "ttl", fence.DefaultTTL, "lease time to live, at least 100ms; renewed every TTL/3")
	fl.DurationVar(&o.wait, "wait", 0, "keep trying to acquire a held lease for up to this long (0: fail at once with 75)")
	fl.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics while the command runs (e.g. 127.0.0.1:9102; a non-loopback one needs --metrics-token-file)")
	fl.StringVar(&o.metricsTokenFile, "metrics-token-file", "", "bearer token (from `FILE`) every scrape of --metrics-addr must send; required on a non-loopback address")
	fl.StringVar(&o.metricsPush, "metrics-push", "", "when the command has ended, push its metrics to the Pushgateway at `URL` (job fence_run)")
	fl.StringVar(&o.metricsTextfile, "metrics-textfile", "", "when the command has ended, write its metrics to `PATH`.prom for node exporter's textfile collector (atomically)")
	fl.DurationVar(&o.grace, "grace", 10*time.Second, "after SIGTERM on lease loss, SIGKILL after this long, capped so that CMD never outlives the lease (see above)")
	fl.StringVar(&o.holder, "holder", "", "record the lease and the run as held by `NAME` (default host:pid of this fence process), shown by 'fence leases', 'fence runs' and to a refused 'fence run'")
	fl.StringVar(&o.cgroup, "cgroup", "", "make the command's cgroup under `DIR`, a cgroup v2 directory delegated to this user (default: under fence's own cgroup, when writable)")
	fl.BoolVar(&o.requireContainment, "require-containment", false, "refuse to run CMD (exit 126) unless it runs in a PID namespace of its own, where it cannot reach fence (see 'The whole tree' above)")
	fl.BoolVar(&o.exportDSN, "export-dsn", false, "pass the DSN, password included, to CMD as $FENCE_DSN (off: CMD does not get it)")
	return cmd
}

func (o runOpts) validate() error {
	hint := "see 'fence run --help'"
	switch {
	case o.lease == "":
		return usagef("fence run --lease NAME -- CMD [ARGS...]", "--lease is required")
	case len(o.argv) == 0:
		return usagef("fence run --lease NAME -- CMD [ARGS...]", "no command to run")
	case o.wait < 0:
		return usagef(hint, "--wait %v is negative", o.wait)
	case o.grace < 0:
		return usagef(hint, "--grace %v is negative", o.grace)
	}
	if err := fence.ValidateName(o.lease); err != nil {
		return usagef("a lease name is 1 to 191 bytes of printable UTF-8: no control or formatting characters", "--lease: %v", err)
	}
	if err := fence.ValidateTTL(o.ttl); err != nil {
		return usagef("use a duration such as 30s or 2m", "--ttl: %v", err)
	}
	if o.holder != "" {
		if err := fence.ValidateHolder(o.holder); err != nil {
			return usagef("a holder name is 1 to 255 bytes of printable UTF-8, such as web-3:4121", "--holder: %v", err)
		}
	}
	if o.ttl < minRunTTL {
		return usagef("use a duration such as 30s or 2m", "--ttl %v is too short to be renewed reliably; the minimum is %v", o.ttl, minRunTTL)
	}
	return o.validateMetrics()
}

// minRunTTL is the shortest --ttl fence run accepts: renewing every TTL/3
// takes a database round trip or two.
const minRunTTL = 100 * time.Millisecond

// Polling a held lease with --wait: sleep until the holder's expiry as the
// database reported it, within these bounds, plus up to 25% jitter.
const (
	minPoll = 25 * time.Millisecond
	maxPoll = 2 * time.Second
)

func (a *app) run(ctx context.Context, o runOpts) error {
	if err := o.validate(); err != nil {
		return err
	}
	a.warnDSNInArgv()
	if _, err := exec.LookPath(o.argv[0]); err != nil {
		code := ExitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = ExitNotFound
		}
		return fail(code, fmt.Errorf("cannot run %q: %v", clip(o.argv[0]), trimExec(err)), "check the command's name, PATH and permissions")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find fence's own binary to run the command's shim: %w", err)
	}
	sup := &supervisor{
		argv: o.argv, env: a.env, dsn: a.dsn, prefix: a.prefix,
		stdin: a.stdin, stdout: a.stdout, stderr: a.stderr,
		ttl: o.ttl, grace: o.grace, log: a.log,
		exe: exe, ownsProcess: ownsProcess(ctx), exportDSN: o.exportDSN,
	}
	if err := a.contain(ctx, o, sup); err != nil {
		return err
	}
	storeOpts, endMetrics, err := a.runMetrics(o)
	if err != nil {
		return err
	}
	if o.holder != "" {
		storeOpts = append(storeOpts, fence.WithHolder(o.holder))
	}
	defer endMetrics() // after the run is finished and the lease released
	s, err := a.open(ctx, true, storeOpts...)
	if err != nil {
		return err
	}
	defer s.Close()

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, append(forwardedSignals, jobControlSignals...)...)
	defer signal.Stop(sigs)

	sup.sigs, sup.store = sigs, s
	if sup.ownsProcess {
		if err := prepareProcess(); err != nil {
			a.log.WarnContext(ctx, "fence: cannot become a child subreaper; descendants that leave the command's tree are not found", "err", err)
		}
	}
	if isTerminal(a.stdin) {
		sup.stdin = nil // /dev/null: a background process group cannot read the terminal
	}
	host, _ := os.Hostname()
	opts := []fence.RunOption{
		fence.WithTTL(o.ttl),
		fence.WithRunLogger(a.log),
		fence.WithDetail(runDetail{Command: filepath.Base(o.argv[0]), Host: host, PID: os.Getpid()}),
	}

	// --wait: retry fail-fast Runs until the deadline. A timeout context on
	// Run would also bound the job, and one on AcquireWait (+ RunHeld) can
	// cancel an acquire statement in flight, leaving its outcome unknown;
	// this loop only ever stops between attempts.
	deadline := time.Now().Add(o.wait)
	backoff := minPoll
	for {
		res, err := fence.Run(ctx, s, o.lease, sup.job, opts...)
		if err != nil {
			return err
		}
		if res.Outcome != fence.NotAcquired {
			return a.runOutcome(ctx, s, o, sup, res)
		}
		left := time.Until(deadline)
		var held *fence.HeldError
		var sleep time.Duration
		switch {
		case left <= 0:
			return a.notAcquired(ctx, s, o, res.Err)
		case errors.As(res.Err, &held):
			sleep = min(max(held.Remaining, minPoll), maxPoll)
			backoff = minPoll
		case fence.IsRetryable(res.Err):
			sleep = backoff
			backoff = min(2*backoff, maxPoll)
		default:
			return a.notAcquired(ctx, s, o, res.Err)
		}
		sleep += time.Duration(rand.Int64N(int64(sleep)/4 + 1))
		a.log.InfoContext(ctx, "fence: waiting for lease", "lease", o.lease, "retry_in", min(sleep, left), "err", res.Err)
		if err := waitOrSignal(ctx, min(sleep, left), sigs, o.lease); err != nil {
			return err
		}
	}
}

// waitOrSignal sleeps for d between acquire attempts. SIGTSTP stops fence
// as it would without a handler (there is no command yet); other signals
// end the wait.
func waitOrSignal(ctx context.Context, d time.Duration, sigs <-chan os.Signal, lease string) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case sig := <-sigs:
			if isJobControl(sig) {
				stopSelf(sig)
				continue
			}
			return fail(exitSignalBase+signalNumber(sig),
				fmt.Errorf("interrupted by %s while waiting for lease %s", signalLabel(sig), quoteName(lease)), "")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func isJobControl(sig os.Signal) bool {
	for _, s := range jobControlSignals {
		if s == sig {
			return true
		}
	}
	return false
}

// warnDSNInArgv warns when --dsn on the command line carries a secret:
// every user of the machine can read it in ps for as long as the job runs.
func (a *app) warnDSNInArgv() {
	if a.dsnFlag == "" || a.dsnFlag != a.dsn {
		return
	}
	if d, err := fencedsn.Parse(a.dsn); err == nil && d.Redacted != a.dsn {
		fmt.Fprintln(a.stderr, "fence run: warning: the password in --dsn can be read by every user of this machine (ps, /proc) while the job runs; hint: put the DSN in $FENCE_DSN or a file read with --dsn-file")
	}
}

// runDetail is stored with the run when it starts, so that `fence runs` and
// a competing `fence run` can say who holds the lease.
type runDetail struct {
	Command string `json:"command"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
}

// notAcquired explains a lease that could not be acquired.
func (a *app) notAcquired(ctx context.Context, s *fence.Store, o runOpts, err error) error {
	var held *fence.HeldError
	if !errors.As(err, &held) {
		if fence.IsRetryable(err) || errors.Is(err, fence.ErrAmbiguous) {
			return fail(ExitUnavailable, fmt.Errorf("acquiring lease %s: %w", quoteName(o.lease), err), unavailableHint)
		}
		return err
	}
	msg := fmt.Sprintf("lease %s is held by %s (fence %d%s) for another %s by the database clock",
		quoteName(o.lease), holderText(held.Holder), held.Fence, a.holderDetail(ctx, s, held), human(held.Remaining))
	hint := fmt.Sprintf("--wait %s waits for it; 'fence leases' shows every holder", suggestWait(held.Remaining))
	if o.wait > 0 {
		msg = fmt.Sprintf("still held after waiting %s: %s", human(o.wait), msg)
		hint = "raise --wait, or see 'fence runs --lease " + quoteName(o.lease) + " --status running'"
	}
	return fail(ExitNotAcquired, errors.New(msg), hint)
}

// holderDetail is ", run R" from the holder's running run, if it is a
// fence run, and ", pid P on HOST" from the run's detail when the holder has
// no name (a fence from before names were recorded).
func (a *app) holderDetail(ctx context.Context, s *fence.Store, held *fence.HeldError) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rs, err := s.Runs(ctx, fence.RunFilter{Lease: held.Lease, Status: fence.RunRunning, Limit: 5})
	if err != nil {
		return ""
	}
	for _, r := range rs {
		var d runDetail
		if r.Fence != held.Fence || json.Unmarshal(r.Result, &d) != nil || d.PID == 0 {
			continue
		}
		out := fmt.Sprintf(", run %d", r.ID)
		if held.Holder != "" {
			return out
		}
		out += fmt.Sprintf(", pid %d", d.PID)
		if d.Host != "" {
			out += " on " + cellText(clip(d.Host))
		}
		return out
	}
	return ""
}

// suggestWait rounds d up to a friendly --wait value.
func suggestWait(d time.Duration) string {
	for _, w := range []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour} {
		if d < w {
			return w.String()
		}
	}
	return (d + time.Hour).Truncate(time.Hour).String()
}

// runOutcome turns the runner's result into fence run's exit status.
func (a *app) runOutcome(ctx context.Context, s *fence.Store, o runOpts, sup *supervisor, res fence.Result) error {
	name := quoteName(o.lease)
	switch res.Outcome {
	case fence.Completed:
		return nil
	case fence.Failed:
		if res.Err != nil {
			what := fmt.Sprintf("the completion of run %d (exit status %d) could not be recorded", res.RunID, sup.code)
			if res.RunID == 0 {
				what = "the run could not be recorded; the command was not started"
			}
			code, hint := classify(res.Err, "fence run")
			if code == ExitUsage {
				code = ExitFailure
			}
			return fail(code, fmt.Errorf("lease %s: %s: %w", name, what, res.Err), hint)
		}
		if sup.refused != "" {
			return fail(ExitLost, fmt.Errorf("lease %s: %s (run %d is marked failed)", name, sup.refused, res.RunID),
				"the database was slow to grant the lease: check its load and locks; a longer --ttl gives more slack")
		}
		if !sup.started {
			return fail(sup.code, res.JobErr, "check the command's name, PATH and permissions")
		}
		return exitStatus(sup.code)
	case fence.Lost:
		why, hint := a.lostReason(ctx, s, res)
		if res.RunID == 0 || !sup.started {
			return fail(ExitLost, fmt.Errorf("%s before the command started", why), hint)
		}
		return fail(ExitLost, fmt.Errorf("%s; %s; run %d is not marked succeeded", why, sup.stopReport(), res.RunID), hint)
	case fence.Rejected:
		why, hint := a.lostReason(ctx, s, res)
		return fail(ExitLost, fmt.Errorf("%s; completion of run %d (exit status %d) rejected as stale", why, res.RunID, sup.code), hint)
	case fence.Unknown:
		return fail(ExitFailure, fmt.Errorf("lease %s: the command exited with status %d, but the answer to the completion of run %d was lost: it may or may not be recorded: %w", name, sup.code, res.RunID, res.Err),
			"check 'fence runs --lease "+o.lease+"': the run shows succeeded or failed if the completion committed, else it stays running until swept lost")
	}
	return fmt.Errorf("lease %s: unexpected run outcome %q: %v", name, res.Outcome, res.Err)
}

// lostReason says why authority was lost, as "lease NAME fence N superseded
// by fence M" and the like, and gives a hint.
func (a *app) lostReason(ctx context.Context, s *fence.Store, res fence.Result) (string, string) {
	name := quoteName(res.Token.Lease)
	const slowHint = "the lease lapsed before it was renewed: was fence paused or the database slow? a longer --ttl gives more slack"
	var le *fence.LostError
	if errors.As(res.Err, &le) {
		if le.Reason == fence.LostUnknown {
			// The store's own read of why had a short grace and did not
			// finish (a loaded machine, a pool reconnecting after a pause):
			// the command is over, so read again with more time.
			if re := readLost(ctx, s, res.Token); re != nil {
				le = re
			}
		}
		return describeLost(le), lostHint(le.Reason, slowHint)
	}
	var ue *fence.UnprovenError
	if errors.As(res.Err, &ue) {
		// The runner gave up on its own clock; the database may know more.
		why := fmt.Sprintf("lease %s fence %d could not be renewed within %s", name, res.Token.Fence, human(ue.Deadline))
		if le := readLost(ctx, s, res.Token); le != nil && le.Current > res.Token.Fence {
			return describeLost(le) + " (no renewal succeeded within " + human(ue.Deadline) + ")", lostHint(le.Reason, slowHint)
		}
		if ue.Last != nil {
			why += " (last error: " + oneLine(ue.Last.Error()) + ")"
		}
		return why, "renewals failed or were too slow: check the database; a longer --ttl gives more slack"
	}
	return fmt.Sprintf("lease %s fence %d: %s", name, res.Token.Fence, oneLine(fmt.Sprint(res.Err))), ""
}

func lostHint(r fence.LostReason, slow string) string {
	switch r {
	case fence.LostRevoked:
		return "an operator revoked it ('fence revoke')"
	case fence.LostSuperseded, fence.LostExpired:
		return slow
	case fence.LostMissing:
		return "the lease row was deleted outside fence"
	}
	return ""
}

// readLost reads the lease (within 2 s, whatever ctx) and says how t lost
// it: superseded or revoked by a newer fence, released or expired at t's
// fence; nil when the row cannot be read or does not say.
func readLost(ctx context.Context, s *fence.Store, t fence.Token) *fence.LostError {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	cur, err := s.Get(gctx, t.Lease)
	if err != nil {
		return nil
	}
	le := &fence.LostError{Lease: t.Lease, Fence: t.Fence, Current: cur.Fence}
	switch {
	case cur.Fence > t.Fence && cur.State == fence.StateRevoked:
		le.Reason = fence.LostRevoked
	case cur.Fence > t.Fence:
		le.Reason = fence.LostSuperseded
	case cur.Fence == t.Fence && cur.State == fence.StateReleased:
		le.Reason = fence.LostReleased
	case cur.Fence == t.Fence && !cur.ExpiresAt.After(cur.DBNow):
		le.Reason = fence.LostExpired
	default:
		return nil
	}
	return le
}

// describeLost is "lease NAME fence N superseded by fence M" and the like.
func describeLost(e *fence.LostError) string {
	name := quoteName(e.Lease)
	switch e.Reason {
	case fence.LostSuperseded:
		return fmt.Sprintf("lease %s fence %d superseded by fence %d", name, e.Fence, e.Current)
	case fence.LostRevoked:
		return fmt.Sprintf("lease %s fence %d revoked (fence is now %d)", name, e.Fence, e.Current)
	case fence.LostExpired:
		return fmt.Sprintf("lease %s fence %d expired by the database clock", name, e.Fence)
	case fence.LostReleased:
		return fmt.Sprintf("lease %s fence %d was released", name, e.Fence)
	case fence.LostMissing:
		return fmt.Sprintf("lease %s fence %d: the lease row no longer exists", name, e.Fence)
	}
	return fmt.Sprintf("lease %s fence %d no longer holds the lease", name, e.Fence)
}

// exitStatus is the command's own non-zero exit status: fence run exits
// with it and prints nothing, the command has spoken for itself.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// lapseMargin is how long before the lease could lapse the command is
// killed at the latest: room for the kill to take effect and for the local
// clock to run a little slower than the database's.
func lapseMargin(ttl time.Duration) time.Duration { return min(ttl/10, time.Second) }

func trimExec(err error) string {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err.Error()
	}
	return err.Error()
}
