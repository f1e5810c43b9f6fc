package torture

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// The sequential model is one lease register plus its protected value, per
// lease name (ops on different leases are independent, so porcupine checks
// each lease's partition on its own).
//
// Validity cannot be modelled by wall time (the database clock decides it),
// so the model treats expiry as a spontaneous transition: before any step the
// current generation may lapse (Valid: true → false), but nothing ever makes
// an invalid generation valid again, and only the latest generation can be
// valid at all. An operation's result is linearizable if some state at some
// instant of its [call, return] window explains it.

// opKind names an operation of the workload.
type opKind uint8

const (
	opAcquire     opKind = iota + 1
	opAcquireWait        // AcquireWait under a deadline: modelled as an acquire
	opRenew
	opRelease
	opRevoke
	opWrite   // fenced single statement (Store.Exec)
	opTxWrite // fenced transaction (Store.InTx)
	opIsHeld
	opRead    // plain read of the protected row
	opGet     // Store.Get of the lease row
	opBarrier // the harness's quiesced read that ends a window
)

var kindNames = map[opKind]string{
	opAcquire: "acquire", opAcquireWait: "acquire-wait", opRenew: "renew", opRelease: "release",
	opRevoke: "revoke", opWrite: "write", opTxWrite: "tx-write", opIsHeld: "is-held",
	opRead: "read", opGet: "get", opBarrier: "barrier",
}

func (k opKind) String() string { return kindNames[k] }

// outcome is what an operation returned, as far as the model cares.
type outcome uint8

const (
	resOK        outcome = iota + 1
	resRefused           // ErrLost (or IsHeld false): the token had no authority
	resHeld              // ErrHeld: someone else holds the lease
	resAmbiguous         // ErrAmbiguous: it may or may not have taken effect
	resNotFound          // ErrNotFound
	resNoMatch           // ErrNoMatch: refused although fence says the token is valid
	resFailed            // a definite error: the operation took no effect
)

var outcomeNames = map[outcome]string{
	resOK: "ok", resRefused: "refused", resHeld: "held", resAmbiguous: "ambiguous",
	resNotFound: "not-found", resNoMatch: "no-match", resFailed: "failed",
}

func (o outcome) String() string { return outcomeNames[o] }

// outcomeByName inverts outcomeNames, for attempts and dumped histories.
var outcomeByName = func() map[string]outcome {
	m := map[string]outcome{}
	for k, v := range outcomeNames {
		m[v] = k
	}
	return m
}()

// input is a porcupine operation's input.
type input struct {
	Kind  opKind
	Fence int64 // the token's fence, for token operations
}

// output is a porcupine operation's output.
type output struct {
	Res    outcome
	Fence  int64 // acquire/revoke: the new fence; get/barrier: the row's fence
	Found  bool  // get/barrier: the lease row exists
	Valid  bool  // get/barrier: held by the database clock; is-held: the answer
	WFence int64 // read/barrier: fence of the last committed write
	Cnt    int64 // read/barrier: committed writes so far
}

// state is the model state of one lease.
type state struct {
	// Fence is the latest generation's fence; when Unknown it is only a
	// strict lower bound (an ambiguous acquire or revoke may have bumped it).
	Fence   int64
	Unknown bool
	// Orphan: no client holds the latest generation's token (it came from an
	// ambiguous acquire, or a revoke).
	Orphan bool
	// Valid: the latest generation is held and not yet expired.
	Valid bool
	// WFence and Cnt are the protected value: the fence of the last
	// committed write and the number of committed writes.
	WFence int64
	Cnt    int64
}

// holds reports whether a token with fence f is the current valid generation.
func (s state) holds(f int64) bool {
	return s.Valid && !s.Unknown && !s.Orphan && s.Fence == f
}

// step returns every state the model can be in after the operation, or none
// if the operation's output cannot be explained from s.
func step(s state, in input, out output) []state {
	pre := []state{s}
	if s.Valid {
		e := s
		e.Valid = false
		pre = append(pre, e) // the lease may have lapsed before this op
	}
	var next []state
	for _, p := range pre {
		next = append(next, apply(p, in, out)...)
	}
	return next
}

func apply(s state, in input, out output) []state {
	f := in.Fence
	switch in.Kind {
	case opAcquire, opAcquireWait:
		switch out.Res {
		case resOK:
			if s.Valid || out.Fence <= s.Fence {
				return nil
			}
			return []state{{Fence: out.Fence, Valid: true, WFence: s.WFence, Cnt: s.Cnt}}
		case resHeld:
			if !s.Valid {
				return nil
			}
			return []state{s}
		case resAmbiguous:
			if s.Valid {
				return []state{s}
			}
			n := s
			n.Unknown, n.Orphan, n.Valid = true, true, true
			return []state{s, n}
		}
	case opRenew:
		switch out.Res {
		case resOK:
			if !s.holds(f) {
				return nil
			}
			return []state{s}
		case resRefused:
			if s.holds(f) {
				return nil
			}
			return []state{s}
		case resAmbiguous:
			return []state{s} // a renewal only moves time, which is not modelled
		}
	case opRelease:
		switch out.Res {
		case resOK:
			if !s.holds(f) {
				return nil
			}
			s.Valid = false
			return []state{s}
		case resRefused:
			if s.holds(f) {
				return nil
			}
			return []state{s}
		case resAmbiguous:
			if !s.holds(f) {
				return []state{s}
			}
			n := s
			n.Valid = false
			return []state{s, n}
		}
	case opRevoke:
		switch out.Res {
		case resOK:
			if out.Fence <= s.Fence {
				return nil
			}
			return []state{{Fence: out.Fence, Orphan: true, WFence: s.WFence, Cnt: s.Cnt}}
		case resNotFound:
			if s.Fence != 0 || s.Unknown {
				return nil
			}
			return []state{s}
		case resAmbiguous:
			n := s
			n.Unknown, n.Orphan, n.Valid = true, true, false
			return []state{s, n}
		}
	case opWrite, opTxWrite:
		switch out.Res {
		case resOK:
			if !s.holds(f) {
				return nil
			}
			s.WFence, s.Cnt = f, s.Cnt+1
			return []state{s}
		case resRefused, resNoMatch:
			if s.holds(f) {
				return nil
			}
			return []state{s}
		case resAmbiguous:
			if !s.holds(f) {
				return []state{s}
			}
			n := s
			n.WFence, n.Cnt = f, s.Cnt+1
			return []state{s, n}
		}
	case opIsHeld:
		if out.Valid != s.holds(f) {
			return nil
		}
		return []state{s}
	case opRead:
		if s.WFence != out.WFence || s.Cnt != out.Cnt {
			return nil
		}
		return []state{s}
	case opGet, opBarrier:
		if in.Kind == opBarrier && (s.WFence != out.WFence || s.Cnt != out.Cnt) {
			return nil
		}
		if !out.Found {
			if s.Fence != 0 || s.Unknown {
				return nil
			}
			return []state{s}
		}
		if s.Unknown && out.Fence <= s.Fence || !s.Unknown && out.Fence != s.Fence {
			return nil
		}
		if out.Valid && !s.Valid {
			return nil
		}
		s.Fence, s.Unknown = out.Fence, false
		// A plain read that finds the lease lapsed does not end the
		// generation: a fenced operation that passed its check while the
		// lease was valid may still commit after the lapse (Store.InTx
		// holds the lease row's share lock from CheckTx to the commit; a
		// guarded statement from its guard to its commit). What it does
		// guarantee is that no takeover commits in between, and a takeover
		// in the model requires the generation to be invalid, so that is
		// still checked. The barrier, taken with every client quiesced,
		// does end it.
		if in.Kind == opBarrier {
			s.Valid = out.Valid
		}
		return []state{s}
	}
	return nil
}

// newModel returns the porcupine model of one lease's window starting in init.
func newModel(init state) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{init} },
		Step: func(st, in, out any) []any {
			ns := step(st.(state), in.(input), out.(output))
			r := make([]any, len(ns))
			for i, n := range ns {
				r[i] = n
			}
			return r
		},
		Equal: func(a, b any) bool { return a.(state) == b.(state) },
		Hash: func(st any) uint64 {
			s := st.(state)
			h := uint64(s.Fence)*1000003 ^ uint64(s.Cnt)*7919 ^ uint64(s.WFence)*131
			if s.Valid {
				h ^= 1 << 61
			}
			if s.Unknown {
				h ^= 1 << 62
			}
			if s.Orphan {
				h ^= 1 << 63
			}
			return h
		},
		DescribeOperation: func(in, out any) string { return describe(in.(input), out.(output)) },
		DescribeState: func(st any) string {
			s := st.(state)
			f := fmt.Sprint(s.Fence)
			if s.Unknown {
				f = ">" + f
			}
			v := "invalid"
			if s.Valid {
				v = "valid"
			}
			if s.Orphan {
				v += ",orphan"
			}
			return fmt.Sprintf("fence %s %s; value fence %d cnt %d", f, v, s.WFence, s.Cnt)
		},
	}
	return nm.ToModel()
}

func describe(in input, out output) string {
	switch in.Kind {
	case opAcquire, opAcquireWait, opRevoke:
		if out.Res == resOK {
			return fmt.Sprintf("%v → ok fence %d", in.Kind, out.Fence)
		}
		return fmt.Sprintf("%v → %v", in.Kind, out.Res)
	case opIsHeld:
		return fmt.Sprintf("is-held(%d) → %v", in.Fence, out.Valid)
	case opRead:
		return fmt.Sprintf("read → fence %d cnt %d", out.WFence, out.Cnt)
	case opGet, opBarrier:
		if !out.Found {
			return fmt.Sprintf("%v → no row", in.Kind)
		}
		s := fmt.Sprintf("%v → fence %d valid %v", in.Kind, out.Fence, out.Valid)
		if in.Kind == opBarrier {
			s += fmt.Sprintf("; value fence %d cnt %d", out.WFence, out.Cnt)
		}
		return s
	}
	return fmt.Sprintf("%v(%d) → %v", in.Kind, in.Fence, out.Res)
}
