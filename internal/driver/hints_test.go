package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The path follows what the process last learnt of the row: nothing (the
// full statement), acquired by us (read first while our TTL runs, since a
// second acquire of a held lease is refused), refused by a valid holder
// (read first), lapsed or released (one plain UPDATE).
func TestHintsPath(t *testing.T) {
	var h Hints
	if p := h.Path("a"); p != PathFull {
		t.Fatalf("unknown name: path %d, want full", p)
	}
	h.Note("a", AcquireResult{Acquired: true, Fence: 1}, time.Hour.Milliseconds())
	if p := h.Path("a"); p != PathReadFirst {
		t.Errorf("acquired by us: path %d, want read-first", p)
	}
	h.Free("a")
	if p := h.Path("a"); p != PathUpdate {
		t.Errorf("released: path %d, want update", p)
	}
	h.Note("a", AcquireResult{Holder: &Lease{LeasedUntilMs: 2000, NowMs: 1000}}, 1000)
	if p := h.Path("a"); p != PathReadFirst {
		t.Errorf("refused by a valid holder: path %d, want read-first", p)
	}
	h.Note("a", AcquireResult{Holder: &Lease{LeasedUntilMs: 1000, NowMs: 1000}}, 1000)
	if p := h.Path("a"); p != PathUpdate {
		t.Errorf("seen lapsed: path %d, want update", p)
	}
	h.Note("b", AcquireResult{}, 1000) // refused, holder unknown: learnt nothing
	if p := h.Path("b"); p != PathFull {
		t.Errorf("nothing learnt: path %d, want full", p)
	}
	h.Note("c", AcquireResult{Acquired: true}, 0) // a TTL already over
	if p := h.Path("c"); p != PathUpdate {
		t.Errorf("own lease lapsed: path %d, want update", p)
	}
	h.Force = PathReadFirst + 1
	if p := h.Path("zzz"); p != PathReadFirst {
		t.Errorf("forced: path %d", p)
	}
	h.Force = -1
	if p := h.Path("a"); p != PathFull {
		t.Errorf("forced out of range: path %d, want full", p)
	}
}

// The map is bounded: past maxHints names it starts over, which only costs
// each name the full statement once.
func TestHintsBounded(t *testing.T) {
	var h Hints
	for i := range maxHints + 10 {
		h.Free(fmt.Sprint(i))
	}
	if n := len(h.m); n > maxHints {
		t.Fatalf("%d hints kept, bound %d", n, maxHints)
	}
	if p := h.Path(fmt.Sprint(maxHints + 9)); p != PathUpdate {
		t.Errorf("the newest name was forgotten: path %d", p)
	}
}

// Acquire runs the steps each path needs and no more, marks a failed
// read-first as written-nothing, and notes the outcome.
func TestHintsAcquireSteps(t *testing.T) {
	type row struct {
		ok    bool
		valid bool
	}
	for _, tc := range []struct {
		name     string
		path     int
		row      row
		getErr   error
		updateOK bool
		want     string // the steps run
		acquired bool
		beforeW  bool
	}{
		{"read-first/held", PathReadFirst, row{true, true}, nil, false, "get", false, false},
		{"read-first/lapsed", PathReadFirst, row{true, false}, nil, true, "get update", true, false},
		{"read-first/lapsed, lost the race", PathReadFirst, row{true, false}, nil, false, "get update full", false, false},
		{"read-first/no row", PathReadFirst, row{}, nil, false, "get full", true, false},
		{"read-first/read fails", PathReadFirst, row{}, context.DeadlineExceeded, false, "get", false, true},
		{"update/taken", PathUpdate, row{}, nil, true, "update", true, false},
		{"update/matched nothing", PathUpdate, row{}, nil, false, "update full", true, false},
		{"full", PathFull, row{}, nil, false, "full", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Hints
			var ran []string
			s := AcquireSteps{
				Get: func(context.Context, string) (Lease, bool, error) {
					ran = append(ran, "get")
					l := Lease{Name: "x", NowMs: 1000, LeasedUntilMs: 500}
					if tc.row.valid {
						l.LeasedUntilMs = 2000
					}
					return l, tc.row.ok, tc.getErr
				},
				Update: func(context.Context, AcquireParams) (AcquireResult, bool, error) {
					ran = append(ran, "update")
					return AcquireResult{Acquired: tc.updateOK}, tc.updateOK, nil
				},
				Full: func(context.Context, AcquireParams) (AcquireResult, error) {
					ran = append(ran, "full")
					return AcquireResult{Acquired: tc.acquired}, nil
				},
			}
			r, err := h.Acquire(context.Background(), AcquireParams{Name: "x", TTLMs: 60_000}, tc.path, s)
			if got := strings.Join(ran, " "); got != tc.want {
				t.Errorf("steps %q, want %q", got, tc.want)
			}
			var bw BeforeWriter
			if gotBW := errors.As(err, &bw) && bw.BeforeWrite(); gotBW != tc.beforeW || (err != nil) != tc.beforeW {
				t.Errorf("err %v (before-write %v), want before-write %v", err, gotBW, tc.beforeW)
			}
			if err != nil {
				return
			}
			if r.Acquired != tc.acquired {
				t.Errorf("acquired %v, want %v", r.Acquired, tc.acquired)
			}
			if tc.row.valid && (r.Holder == nil || r.Holder.LeasedUntilMs != 2000) {
				t.Errorf("refusal without the holder read: %+v", r)
			}
			if r.Acquired && h.Path("x") != PathReadFirst {
				t.Errorf("an acquisition was not noted")
			}
		})
	}
}
