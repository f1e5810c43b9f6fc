package driver

import (
	"fmt"
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
