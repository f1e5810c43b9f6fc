package torture

import (
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/nemesis"
)

// The pause after a nemesis event is the time to the commit of the first
// operation begun after it: an operation begun before the cut that commits
// later does not end it, nor does one that failed.
func TestNemesisPauses(t *testing.T) {
	s := time.Second
	h := &harness{cfg: Config{Nemesis: &NemesisConfig{}}}
	c := &h.commits
	add := func(call, ret time.Duration, res outcome, k opKind) {
		h.noteOp(&op{Call: int64(call), Return: int64(ret), Res: res, Kind: k})
	}
	add(100*time.Millisecond, 150*time.Millisecond, resOK, opWrite)
	add(1900*time.Millisecond, 2950*time.Millisecond, resOK, opWrite) // begun before the cut at 2 s (the quiet probe at 1 s: capped)
	add(2100*time.Millisecond, 2200*time.Millisecond, resFailed, opWrite)
	add(2200*time.Millisecond, 4200*time.Millisecond, resOK, opRead) // a read commits nothing
	add(3000*time.Millisecond, 5500*time.Millisecond, resOK, opAcquire)
	add(3100*time.Millisecond, 5000*time.Millisecond, resOK, opWrite) // ends the cut's pause: 3 s
	add(6000*time.Millisecond, 6100*time.Millisecond, resOK, opRenew) // after the heal at 5.8 s: 0.3 s
	rec := &nemesis.Record{Steps: []nemesis.Step{{Kind: nemesis.Split}},
		Applied: []nemesis.Event{{T: 1500 * time.Millisecond, What: "cut"}, {T: 5300 * time.Millisecond, What: "heal"}, {T: 9 * s, What: "cut"}}}
	ps := c.pauses(rec, int64(500*time.Millisecond)) // the schedule began 0.5 s into the run
	want := []Pause{{"quiet", s}, {"split cut", 3 * s}, {"split heal", 300 * time.Millisecond}}
	if len(ps) != len(want) {
		t.Fatalf("pauses %v, want %v (the cut after the last commit left out)", ps, want)
	}
	for i := range want {
		if ps[i] != want[i] {
			t.Errorf("pause %d: %v, want %v", i, ps[i], want[i])
		}
	}
	if got := pauseSummary(ps); !strings.Contains(got, "split cut n=1 median 3.00s max 3.00s") {
		t.Errorf("summary %q", got)
	}
}
