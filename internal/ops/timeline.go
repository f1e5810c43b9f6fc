package ops

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencekit/fence"
)

// The timeline draws runs as bars on one time axis, a row per lease: what a
// table of runs cannot show is an abandoned run still going while its
// successor runs. It is SVG rendered here, so that it reads without
// JavaScript; its colours come from classes (the page's stylesheet) with
// fill attributes as the fallback of the standalone image.
//
// What it marks, and from what:
//   - a bar per run, from its start to its end (to now while running),
//     class "bar" and the run's status, labelled with its fence;
//   - "overlap": the time a run of an older fence was still going after a
//     newer fence's run had started. The ledger knows a stale run's end
//     when its worker reported it (its refused completion, see
//     fence.Store.FinishRun) or when a sweep marked it lost;
//   - "takeover": the start of a newer fence's run while an older one was
//     still going;
//   - "revoke": the lease's current revoke, at the time of that change. The
//     ledger keeps no history of revokes, so only the latest shows;
//   - "gap": a time without runs longer than 3× the usual interval between
//     this lease's starts. fence does not store schedules, so a missed
//     cron slot cannot be known; a long gap is what can be said honestly.

const (
	tlWidth   = 1000.0
	tlLeft    = 180.0 // lease names
	tlRight   = 16.0
	tlTop     = 30.0 // the axis
	tlLane    = 24.0
	tlBar     = 14.0
	tlRowGap  = 14.0
	tlMaxLane = 6
	// tlDigit is the width of one digit of a fence label at the label's
	// font size (11 user units, monospace: 0.6 em), for placing labels
	// without measuring text. The image says its font itself, for when it
	// is shown without the page's stylesheet.
	tlDigit = 6.6
)

// statusFill is the fallback colour of each run status.
var statusFill = map[fence.RunStatus]string{
	fence.RunSucceeded: "#15803d", fence.RunFailed: "#b91c1c", fence.RunLost: "#b91c1c",
	fence.RunAbandoned: "#b45309", fence.RunRunning: "#1d4ed8",
}

type tlRun struct {
	fence.RunInfo
	end     time.Time // FinishedAt, or now while running
	lane    int
	x0, x1  float64
	labelIn bool
	// noLabel: no room for the label in any lane; the bar's title has it.
	noLabel bool
	// labelLeft: the label goes before the bar, which ends too near the
	// right edge for it.
	labelLeft bool
}

type tlRow struct {
	lease string
	runs  []*tlRun
	lanes int
	y     float64
	// revokedAt is when the lease was revoked, zero unless its current
	// state is revoked.
	revokedAt time.Time
}

// timeline renders runs (any order) as an SVG document fragment with the
// SVG namespace, so that it is both inline markup of the page and a
// standalone image. leases gives the current state of the leases drawn, for
// their revoke mark (missing ones have none); at most maxRows leases are
// drawn, those with the latest starts, and the rest are counted in a note.
func timeline(runs []fence.RunInfo, now time.Time, leases map[string]fence.LeaseInfo, maxRows int) string {
	return drawBars(runs, now, leases, maxRows, runsLook)
}

// look is what tells one timeline from another: the runs' and the task
// epochs' (epochs.go) are drawn by the same code.
type look struct {
	id, noun string // the svg's id; what a bar is, plural ("Runs")
	// bar says what a bar is in its title, its data-kind and an extra class
	// (with a leading space, or "").
	bar func(r *tlRun) (what, kind, class string)
	// overlapText is the title of a stale bar's overlap with its successor;
	// nil: the runs' wording.
	overlapText func(r, succ *tlRun) string
}

// hatch is the id of the overlap's fill pattern: one per image, so that
// two timelines inline in one page do not share an id.
func (lk look) hatch() string {
	if lk.id == "timeline" {
		return "hatch"
	}
	return lk.id + "-hatch"
}

func (lk look) overlap(r, succ *tlRun) string {
	if lk.overlapText != nil {
		return lk.overlapText(r, succ)
	}
	return fmt.Sprintf("run %d (fence %d) was still going %s after run %d (fence %d) had started", r.ID, r.Fence, human(r.end.Sub(succ.StartedAt)), succ.ID, succ.Fence)
}

var runsLook = look{id: "timeline", noun: "Runs", bar: func(r *tlRun) (string, string, string) {
	// A term of leadership (fence.Elect) is outlined and says who led.
	if r.IsTerm() {
		return fmt.Sprintf("term of leader %s (run %d)", holderText(r.Holder, true), r.ID), "term", " term"
	}
	what := fmt.Sprintf("run %d", r.ID)
	if r.Holder != "" {
		what += " by " + r.Holder
	}
	return what, "run", ""
}}

func drawBars(runs []fence.RunInfo, now time.Time, leases map[string]fence.LeaseInfo, maxRows int, lk look) string {
	var b strings.Builder
	if len(runs) == 0 {
		fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="timeline" id="%s" viewBox="0 0 1000 40" role="img" aria-label="No %s to draw"><text class="note" x="8" y="24">No %s to draw.</text></svg>`,
			lk.id, esc(strings.ToLower(lk.noun)), esc(strings.ToLower(lk.noun)))
		return b.String()
	}
	byLease := map[string]*tlRow{}
	var rows []*tlRow
	t0, t1 := runs[0].StartedAt, now
	last := time.Time{}
	for _, r := range runs {
		row := byLease[r.Lease]
		if row == nil {
			row = &tlRow{lease: r.Lease}
			if l, ok := leases[r.Lease]; ok && l.State == fence.StateRevoked {
				row.revokedAt = l.UpdatedAt
			}
			byLease[r.Lease] = row
			rows = append(rows, row)
		}
		tr := &tlRun{RunInfo: r, end: r.FinishedAt}
		if tr.end.IsZero() {
			tr.end = now
		}
		row.runs = append(row.runs, tr)
		if r.StartedAt.Before(t0) {
			t0 = r.StartedAt
		}
		if tr.end.After(last) {
			last = tr.end
		}
	}
	// The axis ends at now while something runs or ended lately, else at
	// the last end: a week-old page of runs is not squeezed against today.
	if span := last.Sub(t0); now.Sub(last) > span/4 {
		t1 = last
	}
	for _, row := range rows {
		if !row.revokedAt.IsZero() && row.revokedAt.After(t1) {
			t1 = row.revokedAt
		}
	}
	span := t1.Sub(t0)
	if span < time.Second {
		span = time.Second
	}
	pad := span / 40
	t0, t1 = t0.Add(-pad), t1.Add(pad)
	x := func(t time.Time) float64 {
		return tlLeft + (tlWidth-tlLeft-tlRight)*float64(t.Sub(t0))/float64(t1.Sub(t0))
	}

	slices.SortFunc(rows, func(a, b *tlRow) int { return cmp.Compare(latest(b), latest(a)) })
	hidden := 0
	if len(rows) > maxRows {
		hidden, rows = len(rows)-maxRows, rows[:maxRows]
	}
	y := tlTop + 10
	for _, row := range rows {
		slices.SortFunc(row.runs, func(a, b *tlRun) int { return cmp.Compare(a.ID, b.ID) })
		row.y = y
		row.lanes = placeLanes(row.runs, x)
		y += float64(row.lanes)*tlLane + tlRowGap
	}
	height := y + 4
	if hidden > 0 {
		height += 18
	}

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="timeline" id="%s" viewBox="0 0 %.0f %.0f" font-family="ui-monospace, monospace" font-size="11" role="img" aria-labelledby="%s-title">`, lk.id, tlWidth, height, lk.id)
	fmt.Fprintf(&b, `<title id="%s-title">%s of %d lease(s) from %s to %s, database time (UTC)</title>`, lk.id, esc(lk.noun), len(rows), esc(stamp(t0)), esc(stamp(t1)))
	fmt.Fprintf(&b, `<defs><pattern id="%s" class="hatch"`, lk.hatch())
	b.WriteString(` width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fee2e2"/><line x1="0" y1="0" x2="0" y2="6" stroke="#b91c1c" stroke-width="3"/></pattern></defs>`)
	axis(&b, t0, t1, x, height)
	if !now.Before(t0) && !now.After(t1) {
		fmt.Fprintf(&b, `<line class="now" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#6b7280" stroke-dasharray="2 3"><title>now: %s</title></line>`,
			x(now), x(now), tlTop-6, height-4, esc(stamp(now)))
	}
	for _, row := range rows {
		drawRow(&b, row, x, now, lk)
	}
	if hidden > 0 {
		fmt.Fprintf(&b, `<text class="note" x="8" y="%.1f">%d more lease(s) in these runs: open one with ?lease=NAME.</text>`, height-8, hidden)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func latest(r *tlRow) int64 {
	var m int64
	for _, x := range r.runs {
		m = max(m, x.StartedAt.UnixMilli())
	}
	return m
}

// placeLanes gives each run (sorted by start) the first lane where neither
// its bar nor its fence label touches what is already there, and returns
// how many lanes the row needs. A label goes inside its bar when it fits,
// else after it, or before it near the right edge. A run with no lane free
// for its bar and label (beyond tlMaxLane lanes) goes without a label (its
// bar's title still has the fence): in the first lane free for its bar
// alone, else in the lane that frees first, its bar over others'. Labels
// never overlap labels or other runs' bars (a fence is 16 digits:
// TestPlaceLanesLabelsNeverOverlap, TestBrowserTimelineLabelsDoNotOverlap).
func placeLanes(runs []*tlRun, x func(time.Time) float64) int {
	const gap = 3.0
	var ends []float64 // per lane, the rightmost x taken
	byLane := map[int][]*tlRun{}
	free := func(left float64) int {
		for i, e := range ends {
			if e+gap <= left {
				return i
			}
		}
		if len(ends) < tlMaxLane {
			ends = append(ends, math.Inf(-1))
			return len(ends) - 1
		}
		return -1
	}
	for _, r := range runs {
		r.x0, r.x1 = x(r.StartedAt), max(x(r.end), x(r.StartedAt)+2)
		label := labelWidth(r.Fence)
		r.labelIn = r.x1-r.x0 >= label+8
		r.labelLeft = !r.labelIn && r.x1+4+label > tlWidth
		left, right := r.x0, r.x1
		switch {
		case r.labelLeft:
			left = r.x0 - 4 - label
		case !r.labelIn:
			right = r.x1 + 4 + label
		}
		lane := free(left)
		if lane < 0 {
			r.noLabel, r.labelIn, r.labelLeft = true, false, false
			left, right = r.x0, r.x1
			if lane = free(left); lane < 0 {
				// Its bar goes over runs of a lane, and their labels under
				// it go: the lane where the fewest labels go, then the one
				// that frees first.
				covered := func(i int) (n int) {
					for _, o := range byLane[i] {
						if l, r2, ok := o.labelSpan(); ok && l < r.x1 && r.x0 < r2 {
							n++
						}
					}
					return n
				}
				lane = 0
				for i := range ends {
					if c, c0 := covered(i), covered(lane); c < c0 || c == c0 && ends[i] < ends[lane] {
						lane = i
					}
				}
				for _, o := range byLane[lane] {
					if l, r2, ok := o.labelSpan(); ok && l < r.x1 && r.x0 < r2 {
						o.noLabel, o.labelIn, o.labelLeft = true, false, false
					}
				}
			}
		}
		ends[lane] = max(ends[lane], right)
		r.lane = lane
		byLane[lane] = append(byLane[lane], r)
	}
	return max(len(ends), 1)
}

// labelSpan is where r's label lies, from left to right, if it has one.
func (r *tlRun) labelSpan() (float64, float64, bool) {
	w := labelWidth(r.Fence)
	switch {
	case r.noLabel:
		return 0, 0, false
	case r.labelIn:
		return r.x0 + 4, r.x0 + 4 + w, true
	case r.labelLeft:
		return r.x0 - 4 - w, r.x0 - 4, true
	}
	return r.x1 + 4, r.x1 + 4 + w, true
}

// labelWidth is the width of fence's label at the label's font size.
func labelWidth(fence int64) float64 {
	return float64(len(strconv.FormatInt(fence, 10))) * tlDigit
}

func drawRow(b *strings.Builder, row *tlRow, x func(time.Time) float64, now time.Time, lk look) {
	laneY := func(l int) float64 { return row.y + float64(l)*tlLane }
	fmt.Fprintf(b, `<g class="lease" data-lease="%s">`, esc(row.lease))
	name := shown(row.lease)
	if r := []rune(name); len(r) > 24 {
		name = string(r[:23]) + "…"
	}
	fmt.Fprintf(b, `<a href="?%s"><text class="lease-name" x="8" y="%.1f">%s<title>%s</title></text></a>`,
		esc("lease="+queryEscape(row.lease)), laneY(0)+tlBar-2, esc(name), esc(shown(row.lease)))
	fmt.Fprintf(b, `<line class="row-rule" x1="8" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#e5e7eb"/>`,
		tlWidth-tlRight, row.y-tlRowGap/2, row.y-tlRowGap/2)

	// Gaps first, under everything else.
	if len(row.runs) >= 4 {
		var steps []time.Duration
		for i := 1; i < len(row.runs); i++ {
			steps = append(steps, row.runs[i].StartedAt.Sub(row.runs[i-1].StartedAt))
		}
		usual := slices.Clone(steps)
		slices.Sort(usual)
		med := usual[len(usual)/2]
		for i, st := range steps {
			prev, next := row.runs[i], row.runs[i+1]
			if med <= 0 || st <= 3*med || !next.StartedAt.After(prev.end) {
				continue
			}
			fmt.Fprintf(b, `<rect class="gap" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f3f4f6"><title>no run for %s, over 3× the usual %s between starts (fence does not store schedules: a guess from the intervals, not a missed slot)</title></rect>`,
				x(prev.end), row.y-2, x(next.StartedAt)-x(prev.end), float64(row.lanes)*tlLane, esc(human(next.StartedAt.Sub(prev.end))), esc(human(med)))
		}
	}

	// The overlap of each run with the next generation's first run.
	for i, r := range row.runs {
		var succ *tlRun
		for _, n := range row.runs[i+1:] {
			if n.Fence > r.Fence {
				succ = n
				break
			}
		}
		if succ == nil || !succ.StartedAt.Before(r.end) {
			continue
		}
		from, to := succ.StartedAt, r.end
		if succ.end.Before(to) {
			to = succ.end
		}
		top, bottom := min(laneY(r.lane), laneY(succ.lane)), max(laneY(r.lane), laneY(succ.lane))+tlBar
		fmt.Fprintf(b, `<rect class="overlap" data-run="%d" data-successor="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="url(#%s)" stroke="#b91c1c"><title>%s</title></rect>`,
			r.ID, succ.ID, x(from), top-2, max(x(to)-x(from), 2), bottom-top+4, lk.hatch(), esc(lk.overlap(r, succ)))
		fmt.Fprintf(b, `<line class="mark takeover" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#b91c1c" stroke-width="2"><title>takeover: fence %d started while fence %d was still going</title></line>`,
			x(succ.StartedAt), x(succ.StartedAt), top-5, bottom+3, succ.Fence, r.Fence)
	}

	for _, r := range row.runs {
		y := laneY(r.lane)
		fill := statusFill[r.Status]
		if fill == "" {
			fill = "#6b7280"
		}
		end := "ended " + stamp(r.end)
		if r.FinishedAt.IsZero() {
			end = "running for " + human(now.Sub(r.StartedAt))
		}
		what, kind, cls := lk.bar(r)
		fmt.Fprintf(b, `<rect class="bar %s%s" data-run="%d" data-fence="%d" data-status="%s" data-kind="%s" x="%.1f" y="%.1f" width="%.1f" height="%.0f" rx="2" fill="%s"><title>%s · fence %d · %s · started %s · %s%s</title></rect>`,
			esc(string(r.Status)), cls, r.ID, r.Fence, esc(string(r.Status)), kind, r.x0, y, r.x1-r.x0, tlBar, fill,
			esc(what), r.Fence, esc(string(r.Status)), esc(stamp(r.StartedAt)), esc(end), esc(errSuffix(r.Error)))
		if r.noLabel {
			continue
		}
		lx, cls, anchor := r.x1+4, "fence-label", "start"
		switch {
		case r.labelIn:
			lx, cls = r.x0+4, "fence-label in"
		case r.labelLeft:
			lx, anchor = r.x0-4, "end"
		}
		fmt.Fprintf(b, `<text class="%s" data-run="%d" x="%.1f" y="%.1f" text-anchor="%s">%d</text>`, cls, r.ID, lx, y+tlBar-3, anchor, r.Fence)
	}

	if !row.revokedAt.IsZero() {
		rx := x(row.revokedAt)
		fmt.Fprintf(b, `<line class="mark revoke" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#b45309" stroke-width="2" stroke-dasharray="4 2"><title>revoked at %s</title></line>`,
			rx, rx, row.y-4, row.y+float64(row.lanes)*tlLane-4, esc(stamp(row.revokedAt)))
		fmt.Fprintf(b, `<text class="mark-label revoke" x="%.1f" y="%.1f">revoked</text>`, rx+3, row.y+float64(row.lanes)*tlLane-6)
	}
	b.WriteString(`</g>`)
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	if r := []rune(e); len(r) > 200 {
		e = string(r[:199]) + "…"
	}
	return " · " + e
}

// axis draws ticks at a round step, labelled in UTC.
func axis(b *strings.Builder, t0, t1 time.Time, x func(time.Time) float64, height float64) {
	steps := []time.Duration{time.Millisecond * 100, 250 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if t1.Sub(t0)/s <= 8 {
			step = s
			break
		}
	}
	layout := "15:04:05"
	switch {
	case step < time.Second:
		layout = "15:04:05.000"
	case step >= 24*time.Hour:
		layout = "Jan 2"
	case step >= time.Minute:
		layout = "15:04"
	}
	b.WriteString(`<g class="axis">`)
	for t := t0.Truncate(step).Add(step); t.Before(t1); t = t.Add(step) {
		tx := x(t)
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e5e7eb"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`,
			tx, tx, tlTop-4, height-4, tx, tlTop-10, esc(t.UTC().Format(layout)))
	}
	fmt.Fprintf(b, `<text x="8" y="%.1f">UTC (db)</text></g>`, tlTop-10)
}

// esc escapes text and attribute values for HTML and XML alike. Characters
// XML does not allow (C0 controls but tab and newlines, invalid UTF-8) become
// U+FFFD, so that run errors, which can hold anything, keep the standalone
// image well-formed.
func esc(s string) string {
	return html.EscapeString(strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0xFFFE || r == 0xFFFF {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD")))
}

func queryEscape(s string) string { return url.QueryEscape(s) }
