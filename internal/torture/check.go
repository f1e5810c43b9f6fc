package torture

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fence"
)

// window is the history between two barriers, per lease, ending with the
// barrier's read; init is each lease's state read at the previous barrier.
type window struct {
	index      int
	start, end int64
	init       []state
	ops        [][]op
	res        []resolution // per lease, from the database log
}

// resolution is what the database log says about one window's ambiguous
// calls of one lease. The log records every commit, in the transaction that
// made it, so an ambiguous write or release that left no event took no
// effect and one that did committed (at an instant still unknown); an
// ambiguous acquire or revoke matters only if the window logged an
// acquisition or revoke that no client was told of. Resolving them before
// porcupine runs keeps each check small; porcupine's search is exponential
// in the number of calls left open to the window's end. The direct checks
// hold the log itself to account.
type resolution struct {
	writes    map[int64]bool // op ids of committed writes
	releases  map[int64]bool // fences whose release committed
	orphanAcq int
	orphanRev int
}

// Violation is one failed check.
type Violation struct {
	Check  string `json:"check"` // "linearizability" or the invariant
	Window int    `json:"window"`
	Lease  string `json:"lease"`
	Detail string `json:"detail"`
	// From and To bound the minimal failing window, in seconds since the
	// start of the run.
	From float64 `json:"from_s"`
	To   float64 `json:"to_s"`
	Ops  int     `json:"ops"`
	File string  `json:"file,omitempty"` // the visualisation, under Out
}

// leaseFacts carries one lease's database-logged facts across windows.
type leaseFacts struct {
	seq    int64  // last event seen
	fence  int64  // the latest generation's fence
	owner  string // its owner ('' after a revoke)
	until  int64  // its leased_until_ms (0 after release or revoke)
	writes int64  // write events so far
	txs    int64  // transactional write events so far
	stale  int64  // stale commits found (unsafe mode finds many)
	// acquireFindings: acquisitions the log shows committed that only an
	// acquire reported as a definite failure can explain (counted in
	// lenient mode, Config.LenientAcquire; a violation otherwise).
	acquireFindings int64
	// issued maps every fence the log shows committed, acquisitions and
	// revokes alike, in any timeline (the log is not rolled back with the
	// lease table), to its owner ("" for a revoke): the external-checker
	// invariant against the log.
	issued map[int64]string
}

// check walks one window's events of one lease in commit order and checks
// DESIGN.md's invariants against them and against what the clients were
// told:
//
//  1. an acquisition commits only when the previous generation had lapsed
//     by the database's own clock (its last leased_until ≤ the
//     acquisition's instant), and renew/release only touch the current,
//     valid generation;
//  2. fences strictly increase, acquisition and revoke alike;
//  3. every committed write carries exactly the latest fence (a lower one
//     committed after a takeover is a stale commit);
//  4. a write the client was told was refused (or failed definitely)
//     committed nothing; every write it was told succeeded committed exactly
//     once; every transaction committed all of its rows or none;
//  5. the same checks apply to clients with skewed clocks (and so do the
//     model checks), which is what "skew changes nothing" means.
//
// span is the database time of the previous barrier and of this one, each
// read once no statement was in flight: a lease event whose own instant
// lies outside it is a statement the barrier missed (it ran across a
// barrier), which makes the window's checks unsound; that is reported as a
// harness failure, "barrier".
func (f *leaseFacts) check(h *harness, w, li int, ops []op, events []event, txCount, cnt int64, span [2]int64, res *resolution) []Violation {
	res.writes, res.releases = map[int64]bool{}, map[int64]bool{}
	if f.issued == nil {
		f.issued = map[int64]string{}
	}
	name := h.leases[li]
	var out []Violation
	bad := func(check, format string, args ...any) {
		if len(out) < 20 {
			out = append(out, Violation{Check: check, Window: w, Lease: name, Detail: fmt.Sprintf(format, args...)})
		}
	}
	byID := map[int64]*op{}
	acq := map[string]*op{} // owner → ok acquire
	revokes := map[int64]*op{}
	var ambAcq, ambRev, failedAcq int
	for i := range ops {
		o := &ops[i]
		switch o.Kind {
		case opWrite, opTxWrite:
			byID[o.ID] = o
		case opAcquire, opAcquireWait:
			res := []outcome{o.Res}
			if o.Kind == opAcquireWait && o.Observed {
				// Its attempts are what may have committed; an ok call's
				// last attempt is the acquisition it returned.
				res = res[:0]
				for _, a := range o.Attempts {
					if r := outcomeByName[a.Res]; r != resOK {
						res = append(res, r)
					}
				}
				if o.Res == resOK {
					res = append(res, resOK)
				}
			}
			for _, r := range res {
				switch r {
				case resOK:
					acq[o.Owner] = o
				case resAmbiguous:
					ambAcq++
				case resFailed:
					failedAcq++
				}
			}
		case opRevoke:
			switch o.Res {
			case resOK:
				revokes[o.Out.Fence] = o
			case resAmbiguous:
				ambRev++
			}
		}
	}
	seen := map[int64]int{}
	acqSeen := map[string]bool{}
	revSeen := map[int64]bool{}
	var orphanAcq, orphanRev int
	for _, e := range events {
		if e.Seq != f.seq+1 {
			bad("event log", "event %d follows %d: a logged commit vanished or the clock skipped", e.Seq, f.seq)
		}
		f.seq = e.Seq
		kind := e.Kind
		if writeKinds[kind] {
			kind = "write"
		}
		if kind != "write" && (e.AtMs < span[0] || e.AtMs > span[1]) {
			bad("harness barrier", "%s of fence %d (event %d) ran at database time %d, outside this window's [%d, %d]: the barrier missed a statement in flight, so the window's checks are not sound", e.Kind, e.Fence, e.Seq, e.AtMs, span[0], span[1])
		}
		if kind == "acquire" || kind == "revoke" {
			// A fence handed out twice, to two owners or to an owner and a
			// revoke, across a rollback of the lease table: every external
			// check that compares fences would take one for the other.
			owner, how := e.Owner, "acquired"
			if kind == "revoke" {
				owner, how = "(revoke)", "taken by a revoke"
			}
			if prev, ok := f.issued[e.Fence]; ok && prev != owner {
				bad("external: fence reused (log)", "fence %d %s by %.8s… (event %d) was already committed to %.8s…: the database handed one fence out twice", e.Fence, how, owner, e.Seq, prev)
			} else if !ok {
				f.issued[e.Fence] = owner
			}
		}
		switch kind {
		case "acquire":
			if e.Fence <= f.fence {
				bad("inv2 monotonic fence", "acquisition of fence %d committed after fence %d (event %d)", e.Fence, f.fence, e.Seq)
			}
			if f.until > e.AtMs {
				bad("inv1 mutual exclusion", "fence %d was acquired at database time %d while fence %d was valid until %d (event %d)", e.Fence, e.AtMs, f.fence, f.until, e.Seq)
			}
			f.fence, f.owner, f.until = e.Fence, e.Owner, e.UntilMs
			// AcquireWait's attempts share one owner: one of its
			// generations is the one it returned, any other came from an
			// attempt of unknown outcome (an orphan). A client handed a
			// fence that never committed is reported below.
			if o, ok := acq[e.Owner]; ok && !acqSeen[e.Owner] && o.Out.Fence == e.Fence {
				acqSeen[e.Owner] = true
			} else {
				orphanAcq++
			}
		case "revoke":
			if e.Fence <= f.fence {
				bad("inv2 monotonic fence", "revoke to fence %d committed after fence %d (event %d)", e.Fence, f.fence, e.Seq)
			}
			f.fence, f.owner, f.until = e.Fence, "", 0
			if revokes[e.Fence] != nil && !revSeen[e.Fence] {
				revSeen[e.Fence] = true
			} else {
				orphanRev++
			}
		case "renew", "release":
			if e.Kind == "release" {
				res.releases[e.Fence] = true
			}
			// at_ms is updated_at_ms. On PostgreSQL and SQLite that is the
			// one clock reading the statement decided validity by. On MySQL
			// the statement reads SYSDATE in its WHERE (the decision) and
			// again in its SET, microseconds later: when the WHERE ran in the
			// last millisecond before the expiry, the SET's reading can be
			// the expiry's millisecond itself (seen: MariaDB, seed 4246), so
			// there only a later millisecond proves the generation had
			// lapsed when the statement decided.
			lapsed := f.until <= e.AtMs
			if h.d == fence.MySQL {
				lapsed = f.until < e.AtMs
			}
			if e.Fence != f.fence || e.Owner != f.owner || f.owner == "" {
				bad("inv1 mutual exclusion", "%s of fence %d committed while the latest generation is fence %d (event %d)", e.Kind, e.Fence, f.fence, e.Seq)
			} else if lapsed {
				bad("inv1 mutual exclusion", "%s of fence %d committed at database time %d after it lapsed at %d (event %d)", e.Kind, e.Fence, e.AtMs, f.until, e.Seq)
			}
			f.until = e.UntilMs
		case "write":
			f.writes++
			if e.Kind == "tx" {
				f.txs++
			}
			if e.Fence != f.fence || f.owner == "" {
				f.stale++
				bad("inv3 no stale commit", "write %d carrying fence %d committed after fence %d had committed (event %d)", e.OpID, e.Fence, f.fence, e.Seq)
			}
			seen[e.OpID]++
			res.writes[e.OpID] = true
			o := byID[e.OpID]
			switch {
			case o == nil:
				bad("inv4 no silent change", "write %d committed (event %d) but no operation of this window made it", e.OpID, e.Seq)
			case o.Fence != e.Fence:
				bad("inv4 no silent change", "write %d carried fence %d but fence %d was stored", o.ID, o.Fence, e.Fence)
			case o.Res != resOK && o.Res != resAmbiguous:
				bad("inv4 no silent change", "write %d by client %d was reported %v (%s) but committed (event %d)", o.ID, o.Client, o.Res, o.Err, e.Seq)
			}
			if seen[e.OpID] > 1 {
				bad("inv4 no silent change", "write %d committed %d times", e.OpID, seen[e.OpID])
			}
		default:
			bad("event log", "unknown event kind %q", e.Kind)
		}
	}
	for _, o := range byID {
		if o.Res == resOK && seen[o.ID] == 0 {
			bad("inv4 no silent loss", "write %d by client %d was reported committed but the database has no trace of it", o.ID, o.Client)
		}
		if o.Res == resNoMatch {
			bad("inv4 says why", "write %d by client %d was refused with ErrNoMatch (the lease still held) although its row exists: %s", o.ID, o.Client, o.Err)
		}
	}
	for owner, o := range acq {
		if !acqSeen[owner] {
			bad("inv2 monotonic fence", "acquisition of fence %d by client %d was reported but never committed", o.Out.Fence, o.Client)
		}
	}
	for fc, o := range revokes {
		if !revSeen[fc] {
			bad("inv2 monotonic fence", "revoke to fence %d by client %d was reported but never committed", fc, o.Client)
		}
	}
	res.orphanAcq, res.orphanRev = orphanAcq, orphanRev
	if orphanAcq > ambAcq {
		extra := orphanAcq - ambAcq
		if h.cfg.LenientAcquire && extra <= failedAcq {
			// See Config.LenientAcquire: acquires reported as definite
			// failures that committed. Counted, not hidden.
			f.acquireFindings += int64(extra)
		} else {
			bad("ambiguity contract", "%d acquisitions committed that no client was told of, but only %d acquire calls had an unknown outcome (%d more were reported as definite failures)", orphanAcq, ambAcq, failedAcq)
		}
	}
	if orphanRev > ambRev {
		bad("inv4 no silent change", "%d revokes committed that no client was told of, but only %d revoke calls had an unknown outcome", orphanRev, ambRev)
	}
	if txCount != f.txs {
		bad("inv4 atomic transaction", "the side table counts %d transactional writes, the protected row's log %d: a transaction committed in part", txCount, f.txs)
	}
	if cnt != f.writes {
		bad("inv4 no silent change", "the protected row's counter is %d but %d writes were logged", cnt, f.writes)
	}
	if len(ops) > 0 {
		for i := range out {
			out[i].From, out[i].To, out[i].Ops = secs(ops[0].Call), secs(ops[len(ops)-1].Return), len(ops)
		}
	}
	return out
}

func secs(ns int64) float64 { return float64(ns) / 1e9 }

// checker runs porcupine on each window and lease in the background, so
// checking overlaps the next window.
type checker struct {
	h       *harness
	in      chan *window
	wg      sync.WaitGroup
	mu      sync.Mutex
	viol    []Violation
	unknown []Violation
	checked int
	maxTime time.Duration
	files   int
	// directFiles counts the dumps of failed checks against the log.
	directFiles int
}

func newChecker(h *harness) *checker {
	// A small buffer applies back-pressure: if checking falls behind, the
	// next barrier waits rather than memory growing.
	return &checker{h: h, in: make(chan *window, 4)}
}

func (c *checker) start() {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for w := range c.in {
			c.check(w)
		}
	}()
}

func (c *checker) submit(w *window) { c.in <- w }

func (c *checker) finish() {
	close(c.in)
	c.wg.Wait()
}

func (c *checker) violation(v Violation) {
	c.mu.Lock()
	c.viol = append(c.viol, v)
	c.mu.Unlock()
}

// history turns one lease's window into porcupine operations. An ambiguous
// operation may take effect at any instant after its call, up to the
// barrier (which waited for orphaned statements to finish), so its return
// is the window's end.
func history(w *window, li int, lenientAcquire bool) []porcupine.Operation {
	var hs []porcupine.Operation
	var res *resolution
	if w.res != nil {
		res = &w.res[li]
	}
	// A generation is released at most once, so a logged release belongs to
	// an ok release of that fence if there is one, never also to an
	// ambiguous retry of it; and of several ambiguous releases of one fence
	// the log cannot say which committed, so those stay "maybe".
	okRelease := map[int64]bool{}
	ambRelease := map[int64]int{}
	for _, o := range w.ops[li] {
		if o.Kind == opRelease && o.Res == resOK {
			okRelease[o.Fence] = true
		}
		if o.Kind == opRelease && o.Res == resAmbiguous {
			ambRelease[o.Fence]++
		}
	}
	for _, o := range w.ops[li] {
		if o.Kind == opAcquireWait && o.Observed {
			// Each attempt of unknown outcome may have committed a
			// generation of its own, at any instant up to the barrier (see
			// attemptObserver); an ok AcquireWait is then its last attempt's
			// acquisition, and a failed one did nothing else.
			for _, a := range o.Attempts {
				r := outcomeByName[a.Res]
				if r == resFailed && lenientAcquire {
					r = resAmbiguous
				}
				if r != resAmbiguous || res != nil && res.orphanAcq == 0 {
					continue
				}
				hs = append(hs, porcupine.Operation{ClientId: o.Client, Input: input{Kind: opAcquire}, Output: output{Res: resAmbiguous},
					Call: a.Call, Return: w.end, Metadata: o.ID})
			}
			if o.Res != resOK {
				continue
			}
		}
		if lenientAcquire && o.Res == resFailed && (o.Kind == opAcquire || o.Kind == opAcquireWait) {
			o.Res, o.Out.Res = resAmbiguous, resAmbiguous // see Config.LenientAcquire
		}
		resolved := false // an ambiguous call the log shows committed
		if o.Res == resAmbiguous && res != nil {
			switch o.Kind {
			case opWrite, opTxWrite:
				if !res.writes[o.ID] {
					continue
				}
				o.Res, o.Out.Res, resolved = resOK, resOK, true
			case opRelease:
				switch {
				case !res.releases[o.Fence] || okRelease[o.Fence]:
					continue // it did not commit
				case ambRelease[o.Fence] == 1:
					o.Res, o.Out.Res, resolved = resOK, resOK, true
				}
			case opAcquire, opAcquireWait:
				if res.orphanAcq == 0 {
					continue
				}
			case opRevoke:
				if res.orphanRev == 0 {
					continue
				}
			case opRenew:
				continue // a renewal only moves time: no effect in the model
			}
		}
		if o.Res == resFailed || o.Res == resNotFound && o.Kind != opRevoke {
			continue // a definite error took no effect: nothing to explain
		}
		if o.Kind == opIsHeld && o.Res != resOK {
			continue
		}
		ret := o.Return
		if o.Res == resAmbiguous || resolved {
			ret = w.end // it may take effect up to the barrier
		}
		out := o.Out
		if o.Kind == opIsHeld {
			out.Res = resOK
		}
		hs = append(hs, porcupine.Operation{ClientId: o.Client, Input: input{Kind: o.Kind, Fence: o.Fence}, Output: out, Call: o.Call, Return: ret, Metadata: o.ID})
	}
	return hs
}

// prefix is the history as it stood at instant t: operations called later
// are dropped and those still running become "maybe" (a mutating one may or
// may not have taken effect by then; a read is dropped). A prefix that is
// not linearizable is a witness on its own, and a shorter one is easier to
// read.
func prefix(hs []porcupine.Operation, t int64) []porcupine.Operation {
	var out []porcupine.Operation
	for _, o := range hs {
		if o.Call > t {
			continue
		}
		if o.Return > t {
			in := o.Input.(input)
			switch in.Kind {
			case opRead, opGet, opIsHeld, opBarrier:
				continue
			}
			out2 := o.Output.(output)
			out2.Res = resAmbiguous
			o.Output, o.Return = out2, t+1
		}
		out = append(out, o)
	}
	return out
}

func (c *checker) check(w *window) {
	for li := range w.ops {
		hs := history(w, li, c.h.cfg.LenientAcquire)
		model := newModel(w.init[li])
		t0 := time.Now()
		res, info := porcupine.CheckOperationsVerbose(model, hs, c.h.cfg.CheckTimeout)
		if res == porcupine.Unknown {
			// A few windows (a crash that broke many calls at once) are
			// far harder than the rest: one more try with a larger budget
			// before calling it unknown.
			res, info = porcupine.CheckOperationsVerbose(model, hs, 3*c.h.cfg.CheckTimeout)
		}
		el := time.Since(t0)
		c.mu.Lock()
		c.checked++
		c.maxTime = max(c.maxTime, el)
		c.mu.Unlock()
		if res == porcupine.Ok {
			continue
		}
		v := Violation{Check: "linearizability", Window: w.index, Lease: c.h.leases[li], Ops: len(hs),
			From: secs(w.start), To: secs(w.end)}
		if res == porcupine.Unknown {
			v.Detail = fmt.Sprintf("porcupine timed out (after %v, then %v) on %d operations: unknown, not a pass", c.h.cfg.CheckTimeout, 3*c.h.cfg.CheckTimeout, len(hs))
			v.File = c.dump(w, li, model, info, hs, "unknown")
			c.mu.Lock()
			c.unknown = append(c.unknown, v)
			c.mu.Unlock()
			continue
		}
		// Shrink: the shortest prefix of the window that is still not
		// linearizable (binary search over call instants).
		calls := make([]int64, 0, len(hs))
		for _, o := range hs {
			calls = append(calls, o.Call)
		}
		sort.Slice(calls, func(i, j int) bool { return calls[i] < calls[j] })
		lo, hi := 0, len(calls)-1
		best := hs
		for lo < hi {
			mid := (lo + hi) / 2
			p := prefix(hs, calls[mid])
			if porcupine.CheckOperationsTimeout(model, p, c.h.cfg.CheckTimeout) == porcupine.Illegal {
				hi, best = mid, p
			} else {
				lo = mid + 1
			}
		}
		if len(best) < len(hs) {
			_, info = porcupine.CheckOperationsVerbose(model, best, c.h.cfg.CheckTimeout)
			v.To = secs(calls[hi])
		}
		v.Ops = len(best)
		v.Detail = fmt.Sprintf("no linearization of %d operations of lease %s explains the results (minimal failing prefix: %d operations, %.3fs–%.3fs)",
			len(hs), c.h.leases[li], len(best), v.From, v.To)
		v.File = c.dump(w, li, model, info, best, "violation")
		c.violation(v)
	}
}

// dump writes the window's history (JSON) and porcupine's visualisation
// (HTML) under Out. It keeps the first few only: one failing window is
// enough to read, and unsafe runs fail in every window.
func (c *checker) dump(w *window, li int, model porcupine.Model, info porcupine.LinearizationInfo, hs []porcupine.Operation, what string) string {
	out := c.h.cfg.Out
	if out == "" {
		return ""
	}
	c.mu.Lock()
	c.files++
	n := c.files
	c.mu.Unlock()
	if n > 5 {
		return ""
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return ""
	}
	base := filepath.Join(out, fmt.Sprintf("%s-w%d-%s", what, w.index, c.h.leases[li]))
	ops := w.ops[li]
	for i := range ops {
		ops[i].KindS, ops[i].ResS = ops[i].Kind.String(), ops[i].Res.String()
	}
	js, _ := json.MarshalIndent(map[string]any{
		"seed": c.h.cfg.Seed, "strict_acquire": !c.h.cfg.LenientAcquire, "pgx": c.h.cfg.Pgx, "window": w.index, "lease": c.h.leases[li], "init": w.init[li],
		"window_start_ns": w.start, "window_end_ns": w.end, "ops": ops,
		"resolution": map[string]any{"committed_writes": keys(w.res[li].writes), "released_fences": keys(w.res[li].releases),
			"orphan_acquisitions": w.res[li].orphanAcq, "orphan_revokes": w.res[li].orphanRev},
	}, "", " ")
	_ = os.WriteFile(base+".json", js, 0o644)
	if err := porcupine.VisualizePath(model, info, base+".html"); err != nil {
		return base + ".json"
	}
	return base + ".html"
}

// dumpDirect writes one lease's window with the events the database logged
// in it (JSON, under Out) when a check against the log failed: the ops, the
// events in commit order and the database times of the two barriers.
func (c *checker) dumpDirect(w *window, li int, events []event, span [2]int64) string {
	out := c.h.cfg.Out
	if out == "" {
		return ""
	}
	c.mu.Lock()
	c.directFiles++
	n := c.directFiles
	c.mu.Unlock()
	if n > 5 {
		return ""
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return ""
	}
	ops := w.ops[li]
	for i := range ops {
		ops[i].KindS, ops[i].ResS = ops[i].Kind.String(), ops[i].Res.String()
	}
	js, _ := json.MarshalIndent(map[string]any{
		"seed": c.h.cfg.Seed, "strict_acquire": !c.h.cfg.LenientAcquire, "pgx": c.h.cfg.Pgx, "window": w.index, "lease": c.h.leases[li],
		"init": w.init[li], "window_start_ns": w.start, "window_end_ns": w.end, "barrier_db_ms": span, "ops": ops, "events": events,
	}, "", " ")
	path := filepath.Join(out, fmt.Sprintf("direct-w%d-%s.json", w.index, c.h.leases[li]))
	if err := os.WriteFile(path, js, 0o644); err != nil {
		return ""
	}
	return path
}

func keys(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
