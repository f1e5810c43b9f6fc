package torture

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The failover fault: an external command (Config.FailoverCmd) takes the
// primary of a replicated cluster away and promotes a standby while the
// clients run, as a cluster manager would on a crash. The clients and the
// harness's own handle connect with a multi-host DSN
// (target_session_attrs=read-write), so they find the new primary by
// themselves; nothing in the harness knows which server is which.
//
// The command prints, one per line on its stdout:
//
//	primary-lost          the instant the primary is gone (the failover pause is measured from here)
//	promoted              the standby accepts writes
//	lost-wal-bytes N      WAL the old primary had that the promoted standby never received
//
// and anything else, which goes to the progress output, as does its stderr. It must return once
// the cluster is whole again (a new standby streaming), so that the next
// failover has a standby to promote.
//
// With synchronous replication every commit fence reported was on the
// standby before it was reported: a failover is a crash of the primary and
// every check of the harness holds across it. With asynchronous replication
// (Config.FailoverLossy) the promoted standby may miss commits the clients
// were told about, acquisitions included: the whole database goes back in
// time, the event log and the protected rows with it. A window with such a
// failover is then not judged against the database's log or the model (the
// log lost its tail, so neither can be held to what the clients saw); the
// facts restart from the promoted database at the barrier, as after the
// rollback fault. What is checked across it is what the outside world saw:
// the external resources (external.go) must never see one fence with two
// owners, which is what the fence floor (ADR 0004) is for.

// failoverState is the fault's bookkeeping.
type failoverState struct {
	mu sync.Mutex
	// left is the window time until the next failover; init: drawn.
	left time.Duration
	init bool
	// lostAt is the harness time (h.now) of the last primary-lost line;
	// open is true until an operation that began after it wrote.
	lostAt int64
	open   bool
	// bg is the last failover command, still rebuilding its standby.
	bg sync.WaitGroup
	// promoting is closed when the running command says promoted (or
	// ends); nil when none runs. The window waits for it (holdWindow).
	promoting        chan struct{}
	pauses, promotes []time.Duration
	lostBytes        []int64
	raised           int64
	unchecked        int64 // windows with a lossy failover
	// thisWindow: a failover ran in the current window (the barrier takes it).
	thisWindow bool
	// writeLat are the latencies of fenced writes that committed, in ns.
	writeLat []int64
}

// failoverDue reports whether the schedule calls for a failover after a
// fault tick of d: the first 1-3 s of window time in, the next 3-6 s after
// each (barriers do not count), so that a 25 s run has several whatever
// the seed.
//
// Only in the first half of a window (inWindow is the time since it
// began): a lossy failover cuts the standby off for up to 0.6 s before it
// kills the primary, and the clients must still be committing then. A
// failover due later waits for the next window.
func (h *harness) failoverDue(d, inWindow time.Duration) bool {
	if h.cfg.FailoverCmd == "" {
		return false
	}
	h.fo.mu.Lock()
	defer h.fo.mu.Unlock()
	f := &h.fo
	if !f.init {
		f.init = true
		f.left = time.Duration(1000+h.faultRng.IntN(2000)) * time.Millisecond
	}
	f.left -= d
	if f.left > 0 || inWindow > h.cfg.Window/2 {
		return false
	}
	f.left = time.Duration(3000+h.faultRng.IntN(3000)) * time.Millisecond
	return true
}

// failover runs the command once. The restart lock is held until the
// command says promoted (or ends), so that no snapshot or barrier runs
// against a cluster without a primary; the rest of the command (rebuilding
// a standby) runs on while the clients go on, and the next failover waits
// for it.
func (h *harness) failover() error {
	h.fo.bg.Wait()
	h.restartMu.Lock()
	locked := true
	unlock := func() {
		if locked {
			locked = false
			h.restartMu.Unlock()
		}
	}
	defer unlock()
	h.stats.fault(FaultFailover)
	promoting := make(chan struct{})
	var promotingOnce sync.Once
	released := func() { promotingOnce.Do(func() { close(promoting) }) }
	defer released()
	h.fo.mu.Lock()
	h.fo.thisWindow = true
	h.fo.promoting = promoting
	h.fo.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	progress := h.cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", h.cfg.FailoverCmd)
	cmd.Env = append(os.Environ(), "FENCE_TORTURE_PREFIX="+h.sc.p)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return err
	}
	start := h.now()
	if err := cmd.Start(); err != nil {
		cancel()
		return fmt.Errorf("torture: failover command: %w", err)
	}
	sc := bufio.NewScanner(out)
	sawLost, promoted := false, false
	// line handles one line of the command's stdout; it reports promoted.
	line := func(l string) bool {
		l = strings.TrimSpace(l)
		now := h.now()
		h.fo.mu.Lock()
		defer h.fo.mu.Unlock()
		switch {
		case l == "primary-lost":
			sawLost = true
			h.fo.lostAt, h.fo.open = now, true
		case l == "promoted":
			if h.fo.lostAt > 0 {
				h.fo.promotes = append(h.fo.promotes, time.Duration(now-h.fo.lostAt))
			}
			return true
		case strings.HasPrefix(l, "lost-wal-bytes "):
			if n, err := strconv.ParseInt(strings.TrimPrefix(l, "lost-wal-bytes "), 10, 64); err == nil {
				h.fo.lostBytes = append(h.fo.lostBytes, n)
			}
		default:
			fmt.Fprintf(progress, "[%6.1fs] failover: %s\n", secs(now), l)
		}
		return false
	}
	for !promoted && sc.Scan() {
		promoted = line(sc.Text())
	}
	released()
	if promoted && h.cfg.FailoverLossy && h.cfg.RaiseAfterFailover {
		// The operator's step after promoting an asynchronous standby
		// (docs/RUNBOOK.md): every lease revoked, its fence raised to the
		// clock, so that no holder the promoted database brought back from
		// before the lost commits can write again.
		var n int
		err := retry(context.Background(), func(ctx context.Context) error {
			r, err := h.admin.RaiseFences(ctx, 0)
			n = len(r.Leases)
			return err
		})
		if err != nil {
			h.stats.error(fmt.Errorf("torture: raise-fences after the failover: %w", err))
		} else {
			h.fo.mu.Lock()
			h.fo.raised += int64(n)
			h.fo.mu.Unlock()
			h.stats.fault("raise-fences")
		}
	}
	unlock()
	finish := func() error {
		defer cancel()
		for sc.Scan() {
			line(sc.Text())
		}
		err := cmd.Wait()
		for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			if l != "" {
				fmt.Fprintf(progress, "[%6.1fs] failover: %s\n", secs(h.now()), l)
			}
		}
		switch {
		case err != nil:
			return fmt.Errorf("torture: failover command (started at %.1fs) failed: %w", secs(start), err)
		case !sawLost:
			return fmt.Errorf("torture: failover command printed no primary-lost line: the pause cannot be measured")
		case !promoted:
			return fmt.Errorf("torture: failover command printed no promoted line")
		}
		return nil
	}
	if !promoted {
		return finish()
	}
	h.fo.bg.Add(1)
	go func() {
		defer h.fo.bg.Done()
		if err := finish(); err != nil {
			h.stats.error(err)
		}
	}()
	return nil
}

// failoverWait waits for the last failover command to end (its standby
// rebuilt), at the end of the run.
func (h *harness) failoverWait() { h.fo.bg.Wait() }

// noteOp measures the failover pause (the first write-like operation that
// began after the primary was lost and committed ends it) and the latency
// of fenced writes.
func (h *harness) noteOp(o *op) {
	if o.Res != resOK {
		return
	}
	switch o.Kind {
	case opAcquire, opRenew, opRelease, opRevoke, opWrite, opTxWrite:
	default:
		return
	}
	if h.cfg.Nemesis != nil {
		h.commits.add(o)
	}
	h.fo.mu.Lock()
	defer h.fo.mu.Unlock()
	if (o.Kind == opWrite || o.Kind == opTxWrite) && o.Fault == "" {
		h.fo.writeLat = append(h.fo.writeLat, o.Return-o.Call)
	}
	if h.fo.open && o.Call >= h.fo.lostAt {
		h.fo.open = false
		h.fo.pauses = append(h.fo.pauses, time.Duration(o.Return-h.fo.lostAt))
	}
}

// takeFailover reports, at a barrier, whether a failover ran in the window
// that ended, and clears the mark.
func (h *harness) takeFailover() bool {
	h.fo.mu.Lock()
	defer h.fo.mu.Unlock()
	v := h.fo.thisWindow
	h.fo.thisWindow = false
	if v && h.cfg.FailoverLossy {
		h.fo.unchecked++
	}
	return v
}

// resyncAfterLossyFailover restarts lease li's facts from the promoted
// database, as doRollback does after a restore: its log's sequence, its
// latest generation, and its write counters (cnt, txc as the barrier read
// them), so that the windows after the failover are judged against the
// history the promoted database goes on from.
func (h *harness) resyncAfterLossyFailover(ctx context.Context, w, li int, cnt, txc int64) error {
	name := h.leases[li]
	var row leaseRow
	var seq int64
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		if row, err = h.sc.readLease(ctx, h.admin.DB(), name); err != nil {
			return err
		}
		seq, err = h.sc.clockSeq(ctx, h.admin.DB(), name)
		return err
	})
	if err != nil {
		return fmt.Errorf("torture: barrier %d: after a failover: reading lease %s: %w", w, name, err)
	}
	f := h.direct[li]
	f.seq = seq
	f.fence, f.owner, f.until = row.fence, row.owner, row.until
	f.writes, f.txs = cnt, txc
	return nil
}

// failoverSummary is the fault's part of a Result.
type failoverSummary struct {
	Failovers int64
	// Pauses: primary-lost until an operation begun after it committed.
	// Promotes: primary-lost until the command said promoted.
	Pauses, Promotes []time.Duration
	LostWALBytes     []int64
	Raised           int64
	// UncheckedWindows: windows with a lossy failover, not judged against
	// the database's log or the model.
	UncheckedWindows int64
	WriteLatency     []time.Duration // p50, p99, max of committed fenced writes
	Writes           int
}

func (h *harness) failoverResult() failoverSummary {
	h.fo.mu.Lock()
	defer h.fo.mu.Unlock()
	s := failoverSummary{Pauses: slices.Clone(h.fo.pauses), Promotes: slices.Clone(h.fo.promotes),
		LostWALBytes: slices.Clone(h.fo.lostBytes), Raised: h.fo.raised, Writes: len(h.fo.writeLat), UncheckedWindows: h.fo.unchecked}
	if n := len(h.fo.writeLat); n > 0 {
		l := slices.Clone(h.fo.writeLat)
		slices.Sort(l)
		s.WriteLatency = []time.Duration{time.Duration(l[n/2]), time.Duration(l[min(n-1, n*99/100)]), time.Duration(l[n-1])}
	}
	return s
}

func fmtDurations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%.2fs", d.Seconds())
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%s (median %.2fs, max %.2fs)", strings.Join(parts, " "), s[len(s)/2].Seconds(), s[len(s)-1].Seconds())
}

// writeFailoverSummary prints the fault's lines and the fenced-write
// latency (printed for every run: the single-server baseline).
func (r *Result) writeFailoverSummary(w io.Writer) {
	f := r.Failover
	if len(f.WriteLatency) == 3 {
		fmt.Fprintf(w, "  fenced-write latency: p50 %.1fms, p99 %.1fms, max %.1fms (%d committed writes, paused ones left out)\n",
			ms(f.WriteLatency[0]), ms(f.WriteLatency[1]), ms(f.WriteLatency[2]), f.Writes)
	}
	if r.FaultCount[FaultFailover] == 0 {
		return
	}
	mode := "synchronous: every window checked"
	if r.FailoverLossy {
		mode = fmt.Sprintf("asynchronous: %d windows with a failover judged by the external resources only", f.UncheckedWindows)
	}
	fmt.Fprintf(w, "  failover:    %d (%s)\n", r.FaultCount[FaultFailover], mode)
	fmt.Fprintf(w, "  failover pause (primary lost → a write begun after it committed): %s\n", fmtDurations(f.Pauses))
	fmt.Fprintf(w, "  primary lost → standby promoted: %s\n", fmtDurations(f.Promotes))
	if len(f.LostWALBytes) > 0 {
		var lost []string
		for _, b := range f.LostWALBytes {
			lost = append(lost, strconv.FormatInt(b, 10))
		}
		fmt.Fprintf(w, "  WAL bytes the promoted standby never received: %s\n", strings.Join(lost, " "))
	}
	if r.FaultCount["raise-fences"] > 0 {
		fmt.Fprintf(w, "  raise-fences after each failover: %d runs, %d leases revoked and raised\n", r.FaultCount["raise-fences"], f.Raised)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// checkFailoverConfig refuses combinations the failover fault cannot run
// with: the restart fault starts a private server of its own and the proxy
// fronts one address, while the failover's clients must reach every server
// of the cluster through a multi-host DSN.
func checkFailoverConfig(cfg Config) error {
	switch {
	case cfg.FailoverCmd == "" && (cfg.FailoverLossy || cfg.RaiseAfterFailover):
		return fmt.Errorf("torture: --failover-lossy and --raise-after-failover need --failover-cmd")
	case cfg.RaiseAfterFailover && !cfg.FailoverLossy:
		return fmt.Errorf("torture: --raise-after-failover is the step after an asynchronous failover: it needs --failover-lossy")
	case cfg.FailoverCmd != "" && (cfg.Faults[FaultRestart] || cfg.Faults[FaultProxy]):
		return fmt.Errorf("torture: the failover fault cannot run with the restart or proxy fault (they need one server of their own); leave them out of --faults")
	}
	return nil
}

// holdWindow keeps the clients of the current window running while a
// failover is under way, until the command says promoted (at most a
// minute): the clients must be committing when the primary is cut off and
// killed, or an asynchronous failover loses nothing, and they must be
// there to end the pause. On a loaded machine the command's first steps can
// outlast the rest of a window.
func (h *harness) holdWindow() {
	h.fo.mu.Lock()
	ch := h.fo.promoting
	h.fo.mu.Unlock()
	if ch == nil {
		return
	}
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}
