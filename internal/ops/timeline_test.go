package ops

import (
	"encoding/xml"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

// TestTimelineMarkup: the standalone image is well-formed XML whatever the
// lease names and run errors hold, hostile markup stays text, a long gap
// between starts is marked as a guess, and a revoked lease is marked.
func TestTimelineMarkup(t *testing.T) {
	const hostileName = `<script>x</script>"'&`
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var runs []fence.RunInfo
	for i, at := range []time.Duration{0, time.Hour, 2 * time.Hour, 3 * time.Hour, 9 * time.Hour} {
		runs = append(runs, fence.RunInfo{ID: int64(i + 1), Lease: hostileName, Fence: int64(100 + i), Status: fence.RunSucceeded,
			StartedAt: t0.Add(at), FinishedAt: t0.Add(at + 5*time.Minute)})
	}
	runs[4].Status, runs[4].Error = fence.RunFailed, "bad \x01\x1b[31m <b>bytes</b> \xff"
	leases := map[string]fence.LeaseInfo{hostileName: {Name: hostileName, State: fence.StateRevoked, UpdatedAt: t0.Add(9*time.Hour + 10*time.Minute)}}
	svg := timeline(runs, t0.Add(9*time.Hour+20*time.Minute), leases, timelineRows)

	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the timeline is not well-formed XML: %v\n%s", err, svg)
		}
	}
	for _, bad := range []string{"<script", "<b>", "\x01", "\x1b", "\xff"} {
		if strings.Contains(svg, bad) {
			t.Errorf("the timeline contains %q raw", bad)
		}
	}
	if n := strings.Count(svg, `<rect class="bar `); n != 5 {
		t.Errorf("%d bars, want 5", n)
	}
	if n := strings.Count(svg, `<rect class="gap"`); n != 1 {
		t.Errorf("%d gaps marked, want 1 (the 6 h between the 4th and 5th start; the usual interval is 1 h)", n)
	}
	if !strings.Contains(svg, "fence does not store schedules") {
		t.Error("the gap does not say it is a guess")
	}
	if !strings.Contains(svg, `class="mark revoke"`) {
		t.Error("no revoke mark for the revoked lease")
	}
	if strings.Contains(svg, `class="overlap"`) {
		t.Error("an overlap drawn between runs that did not overlap")
	}
	if !strings.Contains(svg, `href="?lease=%3Cscript%3Ex%3C%2Fscript%3E%22%27%26"`) {
		t.Errorf("the lease's link is not its escaped name:\n%s", svg)
	}
}

// TestPlaceLanesLabelsNeverOverlap: whatever the runs (bursts of short
// runs, long ones, overlaps, 16-digit fences), no fence label as placed
// covers another label or another run's bar in its lane. (With more runs
// than lanes, runs shared a lane with their labels on top of each other.)
func TestPlaceLanesLabelsNeverOverlap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for round := range 300 {
		var runs []*tlRun
		at := t0
		n := 2 + rng.IntN(40)
		for i := range n {
			at = at.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
			// Mostly one after another; now and then a stale run that
			// goes on long after its successors started.
			d := time.Duration(rng.IntN(1500)) * time.Millisecond
			if rng.IntN(6) == 0 {
				d *= 5
			}
			runs = append(runs, &tlRun{RunInfo: fence.RunInfo{ID: int64(i + 1), Fence: 1796343098170000 + int64(i)*1000, StartedAt: at}, end: at.Add(d)})
		}
		t1 := runs[len(runs)-1].end
		for _, r := range runs {
			if r.end.After(t1) {
				t1 = r.end
			}
		}
		x := func(tm time.Time) float64 {
			return tlLeft + (tlWidth-tlLeft-tlRight)*float64(tm.Sub(t0))/float64(t1.Sub(t0)+time.Millisecond)
		}
		placeLanes(runs, x)
		type span struct{ l, r float64 }
		labelOf := func(r *tlRun) (span, bool) {
			w := labelWidth(r.Fence)
			switch {
			case r.noLabel:
				return span{}, false
			case r.labelIn:
				return span{r.x0 + 4, r.x0 + 4 + w}, true
			case r.labelLeft:
				return span{r.x0 - 4 - w, r.x0 - 4}, true
			}
			return span{r.x1 + 4, r.x1 + 4 + w}, true
		}
		meet := func(a, b span) bool { return a.l < b.r && b.l < a.r }
		labelled := 0
		for i, a := range runs {
			la, ok := labelOf(a)
			if !ok {
				continue
			}
			labelled++
			if la.l < 0 || la.r > tlWidth {
				t.Errorf("round %d: run %d's label %v leaves the image", round, a.ID, la)
			}
			if a.labelIn && la.r > a.x1 {
				t.Errorf("round %d: run %d's label is inside a bar too short for it", round, a.ID)
			}
			for j, b := range runs {
				if i == j || a.lane != b.lane {
					continue
				}
				if meet(la, span{b.x0, b.x1}) {
					t.Errorf("round %d: run %d's label %v covers run %d's bar [%.1f %.1f] in lane %d", round, a.ID, la, b.ID, b.x0, b.x1, a.lane)
				}
				if lb, ok := labelOf(b); ok && j > i && meet(la, lb) {
					t.Errorf("round %d: the labels of runs %d and %d meet in lane %d", round, a.ID, b.ID, a.lane)
				}
			}
		}
		if labelled == 0 {
			t.Errorf("round %d: no run of %d has a label", round, n)
		}
	}
}
