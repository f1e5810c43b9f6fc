package ops

import (
	"encoding/xml"
	"io"
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
