package zombie

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// state of one task in the model: its epoch, whether that epoch may still
// act (a revoke ends it), and the set of steps whose effect committed.
type state struct {
	Epoch   int64
	Valid   bool
	Applied uint64
}

// model is a fenced ledger: an effect commits only for the task's current,
// valid epoch and only once per step; a replay returns a committed step's
// result; a refusal is always allowed (refusing is never unsafe); an
// unknown outcome may or may not have committed.
var model = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(input).Task
			by[k] = append(by[k], op)
		}
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{state{}} },
	Step: func(s, in, out any) []any {
		st, i, o := s.(state), in.(input), out.(string)
		bit := uint64(1) << uint(i.Step)
		switch i.Kind {
		case opTakeover:
			if i.Epoch <= st.Epoch {
				return nil
			}
			return []any{state{Epoch: i.Epoch, Valid: true, Applied: st.Applied}}
		case opRevoke:
			if i.Epoch < st.Epoch {
				return nil
			}
			return []any{state{Epoch: i.Epoch, Valid: false, Applied: st.Applied}}
		}
		canApply := st.Valid && i.Epoch == st.Epoch && st.Applied&bit == 0
		next := st
		next.Applied |= bit
		switch o {
		case applied:
			if canApply {
				return []any{next}
			}
		case replayed:
			if st.Applied&bit != 0 {
				return []any{st}
			}
		case refused:
			return []any{st}
		case unknown:
			if canApply {
				return []any{st, next}
			}
			return []any{st}
		}
		return nil
	},
	DescribeOperation: func(in, out any) string {
		i := in.(input)
		if i.Kind == opApply {
			return fmt.Sprintf("%s s%d@%d -> %v", i.Task, i.Step, i.Epoch, out)
		}
		return fmt.Sprintf("%s %s %d", i.Task, i.Kind, i.Epoch)
	},
}

// verdict is the checks of one history.
type verdict struct {
	Linearizable bool
	Stale        int // applies that committed after their epoch ended
	Duplicates   int // steps applied more than once
}

// check runs porcupine and the two direct counts on h. Stale counts an
// apply whose execution began after an epoch change of its task to a later
// epoch (or a revoke of its own) had returned; duplicates counts extra
// applied effects per (task, step).
func check(h []porcupine.Operation) verdict {
	res, _ := porcupine.CheckOperationsVerbose(model.ToModel(), h, time.Minute)
	var v verdict
	v.Linearizable = res == porcupine.Ok
	count := map[[2]any]int{}
	for _, op := range h {
		i := op.Input.(input)
		if i.Kind != opApply || op.Output != applied {
			continue
		}
		count[[2]any{i.Task, i.Step}]++
		for _, ch := range h {
			c := ch.Input.(input)
			if c.Task != i.Task || ch.Return >= op.Call {
				continue
			}
			if (c.Kind == opTakeover && c.Epoch > i.Epoch) || (c.Kind == opRevoke && c.Epoch >= i.Epoch) {
				v.Stale++
				break
			}
		}
	}
	for _, n := range count {
		if n > 1 {
			v.Duplicates += n - 1
		}
	}
	return v
}
