package torture

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fence/fencedsn"
)

type stats struct {
	mu      sync.Mutex
	byKind  map[string]int64
	byRes   map[string]int64
	byAPI   map[string]int64 // write ops: API and outcome
	byShape map[string]int64 // single-statement writes: SQL shape and outcome
	faults  map[string]int64
	bySkew  [2]map[string]int64 // outcomes of write-like ops: [unskewed, skewed]
	errs    map[string]int64
	acqErrs map[string]int64 // acquires reported as definite failures, by error class
	// AcquireWait calls, their Acquire attempts, and attempts of unknown
	// outcome: all, and those in calls that went on to succeed.
	awCalls, awAttempts, awAmb, awAmbThenOK int64
	ops                                     atomic.Int64
	amb                                     atomic.Int64
	windows                                 atomic.Int64
	lastErrs                                []string
}

func newStats() *stats {
	return &stats{byKind: map[string]int64{}, byRes: map[string]int64{}, byAPI: map[string]int64{}, byShape: map[string]int64{}, faults: map[string]int64{},
		bySkew: [2]map[string]int64{{}, {}}, errs: map[string]int64{}, acqErrs: map[string]int64{}}
}

func (s *stats) record(o *op) {
	s.ops.Add(1)
	if o.Res == resAmbiguous {
		s.amb.Add(1)
	}
	s.mu.Lock()
	s.byKind[o.Kind.String()]++
	s.byRes[o.Res.String()]++
	if o.API != "" {
		s.byAPI[o.API+" "+o.Res.String()]++
	}
	if o.Shape != "" {
		s.byShape[o.Shape+" "+o.Res.String()]++
	}
	sk := 0
	if o.Skewed {
		sk = 1
	}
	s.bySkew[sk][o.Kind.String()+" "+o.Res.String()]++
	if o.Res == resFailed || o.Res == resAmbiguous {
		s.errs[errClass(o.Err)]++
	}
	if o.Res == resFailed && o.Kind == opAcquire {
		s.acqErrs[errClass(o.Err)]++
	}
	if o.Observed {
		s.awCalls++
		for _, a := range o.Attempts {
			s.awAttempts++
			if a.Res == resAmbiguous.String() {
				s.awAmb++
				if o.Res == resOK {
					s.awAmbThenOK++
				}
			}
		}
	}
	s.mu.Unlock()
}

// errClass shortens an error to its kind, for the summary.
func errClass(e string) string {
	for _, k := range []string{"context deadline exceeded", "context canceled", "connection reset", "broken pipe",
		"EOF", "connection refused", "database is closed", "invalid connection", "bad connection",
		"deadlock", "Lock wait timeout", "serializ", "terminating connection", "shutting down", "the database system is",
		"interrupted", "SQLITE_BUSY", "database is locked", "timeout", "closed"} {
		if strings.Contains(e, k) {
			return k
		}
	}
	if len(e) > 60 {
		e = e[:60]
	}
	return e
}

func (s *stats) fault(kind string) {
	s.mu.Lock()
	s.faults[kind]++
	s.mu.Unlock()
}

func (s *stats) error(err error) {
	s.mu.Lock()
	s.lastErrs = append(s.lastErrs, err.Error())
	s.mu.Unlock()
}

// Result is the outcome of a run.
type Result struct {
	DSN       string
	Dialect   string
	Seed      uint64
	Unsafe    bool
	Pgx       bool
	Clients   int
	Leases    int
	Faults    string
	Elapsed   time.Duration
	Ops       int64
	Ambiguous int64
	Windows   int64
	Checked   int
	MaxCheck  time.Duration
	ByKind    map[string]int64
	ByResult  map[string]int64
	ByAPI     map[string]int64
	ByShape   map[string]int64
	// ShapesSkipped: write shapes this server refused, and why.
	ShapesSkipped map[string]string
	OldFenceRule  bool
	// GaleraOldGuard: the Galera control ran (Config.GaleraOldGuard).
	GaleraOldGuard bool
	// NemesisFile is where the partition schedule was written (with what
	// was applied when), NemesisSteps how many steps it had.
	NemesisFile  string
	NemesisSteps int
	// NetPauses: after each cut, heal, kill and rejoin of the nemesis, the
	// time until an operation begun after it committed (partition.go).
	NetPauses []Pause
	// CommitOrder says what numbered the event log: the clock row, or a
	// Galera node's binary log (with the transactions and events read).
	CommitOrder string
	// BarrierGaveUp counts the barriers whose wait for in-flight
	// statements ran out (torture.go waitInFlight).
	BarrierGaveUp int
	// The external resources (extResource), over all leases: distinct
	// fences seen, writes accepted, and writes refused for carrying a fence
	// below the highest one written.
	ExtFences, ExtAccepted, ExtRefused int64
	FaultCount                         map[string]int64
	BySkew                             [2]map[string]int64
	ErrClasses                         map[string]int64
	// AcqFailed counts acquires reported as definite failures, by error
	// class: what strict mode (the default) takes at its word.
	AcqFailed    map[string]int64
	StaleCommits int64
	// AcquireFindings counts, in lenient mode, acquisitions that only an
	// acquire reported as a definite failure can explain
	// (Config.LenientAcquire).
	AcquireFindings int64
	StrictAcquire   bool
	// AcquireWait: calls, Acquire attempts, attempts of unknown outcome,
	// and of those the ones in calls that then succeeded.
	AWCalls, AWAttempts, AWAmbiguous, AWAmbiguousThenOK int64
	// Failover: the failover fault's measurements and the fenced-write
	// latency (failover.go).
	Failover      failoverSummary
	FailoverLossy bool
	Violations    []Violation
	Unknown       []Violation
	Errors        []string
}

func (h *harness) result() *Result {
	s := h.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	c := h.checker
	c.mu.Lock()
	defer c.mu.Unlock()
	redacted := h.cfg.DSN
	if d, err := fencedsn.Parse(h.cfg.DSN); err == nil {
		redacted = d.Redacted
	}
	r := &Result{DSN: redacted, Dialect: string(h.d), Seed: h.cfg.Seed, Unsafe: h.cfg.Unsafe, Pgx: h.cfg.Pgx, StrictAcquire: !h.cfg.LenientAcquire,
		Clients: h.cfg.Clients, Leases: h.cfg.Leases, Faults: h.cfg.Faults.String(),
		Elapsed: time.Since(h.start), Ops: s.ops.Load(), Ambiguous: s.amb.Load(), Windows: s.windows.Load(),
		Checked: c.checked, MaxCheck: c.maxTime, ByKind: clone(s.byKind), ByResult: clone(s.byRes), ByAPI: clone(s.byAPI),
		ByShape: clone(s.byShape), ShapesSkipped: h.shapesSkipped, OldFenceRule: h.cfg.OldFenceRule,
		FaultCount: clone(s.faults), BySkew: [2]map[string]int64{clone(s.bySkew[0]), clone(s.bySkew[1])},
		ErrClasses: clone(s.errs), AcqFailed: clone(s.acqErrs), Violations: append([]Violation(nil), c.viol...), Unknown: append([]Violation(nil), c.unknown...),
		Errors:  append([]string(nil), s.lastErrs...),
		AWCalls: s.awCalls, AWAttempts: s.awAttempts, AWAmbiguous: s.awAmb, AWAmbiguousThenOK: s.awAmbThenOK}
	r.Failover, r.FailoverLossy = h.failoverResult(), h.cfg.FailoverLossy
	r.GaleraOldGuard = h.cfg.GaleraOldGuard
	r.CommitOrder = "per-lease clock row"
	r.BarrierGaveUp = h.barrierGaveUp
	if b := h.binlog; b != nil {
		r.CommitOrder = fmt.Sprintf("the admin node's binary log (Galera; %d transactions, %d events read; barriers that waited for a statement on another node: %d)", b.txs, b.events, h.nodeWaits)
	}
	if h.cfg.Faults[FaultSkew] {
		r.FaultCount["skew-clients"] = int64(h.cfg.Clients / 2)
	}
	for _, x := range h.ext {
		x.mu.Lock()
		r.ExtFences += int64(len(x.owners))
		r.ExtAccepted += x.accepted
		r.ExtRefused += x.refused
		x.mu.Unlock()
	}
	for _, f := range h.direct {
		r.StaleCommits += f.stale
		r.AcquireFindings += f.acquireFindings
	}
	return r
}

func clone(m map[string]int64) map[string]int64 {
	o := make(map[string]int64, len(m))
	for k, v := range m {
		o[k] = v
	}
	return o
}

func (h *harness) progress(done chan struct{}) {
	w := h.cfg.Progress
	if w == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		n := h.stats.ops.Load()
		h.stats.mu.Lock()
		var nf int64
		for _, v := range h.stats.faults {
			nf += v
		}
		h.stats.mu.Unlock()
		h.checker.mu.Lock()
		nv, nu, nc := len(h.checker.viol), len(h.checker.unknown), h.checker.checked
		h.checker.mu.Unlock()
		fmt.Fprintf(w, "[%6.1fs] ops %d (%d/s) ambiguous %d faults %d windows %d checked %d unknown %d violations %d\n",
			time.Since(h.start).Seconds(), n, n-last, h.stats.amb.Load(), nf, h.stats.windows.Load(), nc, nu, nv)
		last = n
	}
}

// OpsPerSec is the run's throughput.
func (r *Result) OpsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// ExitCode is 0 when clean, 1 on violations, 2 on errors or unknown checks.
func (r *Result) ExitCode() int {
	switch {
	case len(r.Violations) > 0:
		return 1
	case len(r.Errors) > 0 || len(r.Unknown) > 0:
		return 2
	}
	return 0
}

func sortedKV(m map[string]int64) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// WriteSummary prints the summary; its last line is "violations: N".
func (r *Result) WriteSummary(w io.Writer) {
	mode := "fenced (Store.Exec / Store.InTx)"
	if r.Pgx {
		mode = "fenced, pgx-native stores (postgres.NewPool; Store.Exec / fencepgx.Exec / fencepgx.InTx / fencepgx.CheckTx + Exec)"
	}
	if r.OldFenceRule {
		mode += "; CONTROL: old fence rule (test triggers make each new fence the previous one + 1)"
	}
	if r.GaleraOldGuard {
		mode = "CONTROL: Galera with the old guard (Store.Fenced's single statement UPDATE … AND EXISTS (… LOCK IN SHARE MODE), no lease-row write)"
	}
	if r.Unsafe {
		mode = "UNSAFE control: IsHeld in Go, then an unfenced write"
		if r.Pgx {
			mode += " (pgx-native stores)"
		}
	}
	fmt.Fprintf(w, "fence-torture summary\n")
	fmt.Fprintf(w, "  database:    %s (%s)\n", r.DSN, r.Dialect)
	fmt.Fprintf(w, "  mode:        %s\n", mode)
	fmt.Fprintf(w, "  seed:        %d\n", r.Seed)
	fmt.Fprintf(w, "  clients:     %d, leases %d, faults %s\n", r.Clients, r.Leases, r.Faults)
	fmt.Fprintf(w, "  elapsed:     %.1fs\n", r.Elapsed.Seconds())
	fmt.Fprintf(w, "  ops:         %d\n", r.Ops)
	fmt.Fprintf(w, "  ops/s:       %.0f\n", r.OpsPerSec())
	fmt.Fprintf(w, "  by kind:     %s\n", sortedKV(r.ByKind))
	fmt.Fprintf(w, "  by result:   %s\n", sortedKV(r.ByResult))
	fmt.Fprintf(w, "  writes by API: %s\n", sortedKV(r.ByAPI))
	fmt.Fprintf(w, "  writes by shape: %s\n", sortedKV(r.ByShape))
	for _, k := range sortedKeys(r.ShapesSkipped) {
		fmt.Fprintf(w, "  shape left out: %s: %s\n", k, r.ShapesSkipped[k])
	}
	fmt.Fprintf(w, "  faults injected: %s\n", sortedKV(r.FaultCount))
	if r.NemesisSteps > 0 {
		f := r.NemesisFile
		if f == "" {
			f = "not written (no --out)"
		}
		fmt.Fprintf(w, "  nemesis schedule: %d steps, %s\n", r.NemesisSteps, f)
		if len(r.NetPauses) > 0 {
			fmt.Fprintf(w, "  nemesis pauses (from the event to the commit of the first operation begun after it; quiet: 1 s before a cut, capped at 1 s): %s\n", pauseSummary(r.NetPauses))
		}
	}
	fmt.Fprintf(w, "  ambiguous ops: %d\n", r.Ambiguous)
	fmt.Fprintf(w, "  errors seen (failed or ambiguous ops): %s\n", sortedKV(r.ErrClasses))
	acq := "strict (a definite failure must not have committed)"
	if !r.StrictAcquire {
		acq = "lenient (--strict-acquire=false: a definite failure is modelled as maybe)"
	}
	fmt.Fprintf(w, "  acquire failures: %s; reported definite: %s\n", acq, sortedKV(r.AcqFailed))
	fmt.Fprintf(w, "  acquire-wait: %d calls, %d attempts, %d of unknown outcome (%d in calls that then succeeded)\n", r.AWCalls, r.AWAttempts, r.AWAmbiguous, r.AWAmbiguousThenOK)
	if len(r.BySkew[1]) > 0 {
		fmt.Fprintf(w, "  writes, unskewed clients: %s\n", writeOutcomes(r.BySkew[0]))
		fmt.Fprintf(w, "  writes, skewed clients:   %s\n", writeOutcomes(r.BySkew[1]))
	}
	fmt.Fprintf(w, "  windows:     %d, porcupine checks %d (slowest %v), unknown %d\n", r.Windows, r.Checked, r.MaxCheck.Round(time.Millisecond), len(r.Unknown))
	fmt.Fprintf(w, "  stale commits in the database log: %d\n", r.StaleCommits)
	if r.CommitOrder != "" {
		fmt.Fprintf(w, "  commit order: %s\n", r.CommitOrder)
	}
	if r.BarrierGaveUp > 0 {
		fmt.Fprintf(w, "  barriers that gave up waiting for a statement in flight: %d (a \"harness barrier\" violation may follow)\n", r.BarrierGaveUp)
	}
	if r.FaultCount["snapshot"] > 0 || r.FaultCount[FaultRollback] > 0 {
		fmt.Fprintf(w, "  rollback:    %d restores (%d with expiry shifted) of %d snapshots of the lease table; restored generations valid: %d, of which held by a client again: %d\n",
			r.FaultCount[FaultRollback], r.FaultCount["rollback-shifted"], r.FaultCount["snapshot"], r.FaultCount["rollback-valid"], r.FaultCount["rollback-revived"])
	}
	r.writeFailoverSummary(w)
	fmt.Fprintf(w, "  external resource: %d fences seen, writes accepted %d, refused %d (below the highest fence written)\n", r.ExtFences, r.ExtAccepted, r.ExtRefused)
	if r.AcquireFindings > 0 {
		fmt.Fprintf(w, "  FINDING: %d acquisitions committed that only acquires reported as definite failures can explain (lenient mode counts them here; the default, --strict-acquire, counts them as violations).\n", r.AcquireFindings)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "  ERROR: %s\n", e)
	}
	for i, v := range r.Unknown {
		if i == 5 {
			fmt.Fprintf(w, "  … %d more unknown\n", len(r.Unknown)-i)
			break
		}
		fmt.Fprintf(w, "  UNKNOWN window %d lease %s: %s %s\n", v.Window, v.Lease, v.Detail, v.File)
	}
	byCheck := map[string]int64{}
	for _, v := range r.Violations {
		byCheck[v.Check]++
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(w, "  violations by check: %s\n", sortedKV(byCheck))
		for i, v := range r.Violations {
			if i == 10 {
				fmt.Fprintf(w, "  … %d more\n", len(r.Violations)-i)
				break
			}
			fmt.Fprintf(w, "  VIOLATION [%s] window %d lease %s (%.3fs–%.3fs, %d ops): %s", v.Check, v.Window, v.Lease, v.From, v.To, v.Ops, v.Detail)
			if v.File != "" {
				fmt.Fprintf(w, " → %s", v.File)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "  reproduce with: --seed %d (the schedule of choices is the seed's; the interleaving is the machine's)\n", r.Seed)
	}
	fmt.Fprintf(w, "violations: %d\n", len(r.Violations))
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func writeOutcomes(m map[string]int64) string {
	out := map[string]int64{}
	for k, v := range m {
		if strings.HasPrefix(k, "write ") || strings.HasPrefix(k, "tx-write ") || strings.HasPrefix(k, "renew ") {
			out[k] = v
		}
	}
	return sortedKV(out)
}
