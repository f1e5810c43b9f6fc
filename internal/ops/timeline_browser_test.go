package ops_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/ops"
	"github.com/fencekit/fence/internal/teststore"
)

// takeover is the incident the timeline exists for, in the ledger: a few
// ordinary runs, then run A of fence A still going when an operator
// revokes the lease and B takes over, starts (A is abandoned), runs and
// succeeds; A's completion arrives afterwards and is refused. Then C holds
// the lease and is running; another lease has a failed run.
type takeover struct {
	store          *fence.Store
	a, b, c        fence.Lease
	runA, runB     int64
	runC           int64
	earlier        []int64
	failed         int64
	fenceA, fenceB int64
}

// waitDB waits until the database clock is d past t0: runs get lengths
// that show, without sleeping a guessed time.
func waitDB(t *testing.T, s *fence.Store, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	t0, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		now, err := s.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now.Sub(t0) >= d {
			return
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, not a wait for an outcome
	}
}

func stageTakeover(t *testing.T, s *fence.Store) takeover {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const name = "nightly-report"
	x := takeover{store: s}
	for range 3 {
		l, err := s.Acquire(ctx, name, time.Minute)
		must(err)
		id, err := s.StartRun(ctx, l.Token, nil)
		must(err)
		waitDB(t, s, 120*time.Millisecond)
		must(s.FinishRun(ctx, l.Token, id, fence.Completion{}))
		must(s.Release(ctx, l.Token))
		x.earlier = append(x.earlier, id)
		waitDB(t, s, 60*time.Millisecond)
	}
	other, err := s.Acquire(ctx, "hourly-sync", time.Minute)
	must(err)
	x.failed, err = s.StartRun(ctx, other.Token, nil)
	must(err)
	waitDB(t, s, 200*time.Millisecond)
	one := 1
	must(s.FinishRun(ctx, other.Token, x.failed, fence.Completion{Err: errors.New("upstream <b>timeout</b>"), ExitCode: &one}))

	x.a, err = s.Acquire(ctx, name, time.Minute)
	must(err)
	x.runA, err = s.StartRun(ctx, x.a.Token, nil)
	must(err)
	waitDB(t, s, 200*time.Millisecond)
	_, err = s.Revoke(ctx, name)
	must(err)
	x.b, err = s.Acquire(ctx, name, time.Minute)
	must(err)
	x.runB, err = s.StartRun(ctx, x.b.Token, nil)
	must(err)
	waitDB(t, s, 250*time.Millisecond)
	must(s.FinishRun(ctx, x.b.Token, x.runB, fence.Completion{}))
	must(s.Release(ctx, x.b.Token))
	waitDB(t, s, 100*time.Millisecond)
	if err := s.FinishRun(ctx, x.a.Token, x.runA, fence.Completion{}); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("the old owner's completion after the takeover: %v, want ErrLost", err)
	}
	waitDB(t, s, 60*time.Millisecond)
	x.c, err = s.Acquire(ctx, name, time.Minute)
	must(err)
	x.runC, err = s.StartRun(ctx, x.c.Token, nil)
	must(err)
	x.fenceA, x.fenceB = x.a.Token.Fence, x.b.Token.Fence
	return x
}

// checkTimeline asserts on the timeline's SVG in the page of ctx: a bar per
// run with its fence as label and its status as class, the overlap of A
// with B, the takeover mark, and status colours that differ.
func checkTimeline(t *testing.T, ctx context.Context, x takeover, how string) {
	t.Helper()
	bar := func(id int64) string {
		return fmt.Sprintf(`document.querySelector('#timeline rect.bar[data-run="%d"]')`, id)
	}
	runs := append(append([]int64{}, x.earlier...), x.failed, x.runA, x.runB, x.runC)
	if n := eval[int](t, ctx, `document.querySelectorAll("#timeline rect.bar").length`); n != len(runs) {
		t.Errorf("%s: %d bars, want %d (one per run)", how, n, len(runs))
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#timeline g.lease").length`); n != 2 {
		t.Errorf("%s: %d lease rows, want 2", how, n)
	}
	for id, status := range map[int64]string{x.runA: "abandoned", x.runB: "succeeded", x.runC: "running", x.failed: "failed", x.earlier[0]: "succeeded"} {
		if got := eval[string](t, ctx, bar(id)+`.getAttribute("class")`); got != "bar "+status {
			t.Errorf("%s: run %d's bar has class %q, want %q", how, id, got, "bar "+status)
		}
	}
	for id, f := range map[int64]int64{x.runA: x.fenceA, x.runB: x.fenceB, x.runC: x.c.Token.Fence} {
		label := eval[string](t, ctx, fmt.Sprintf(`(function () { var e = document.querySelector('#timeline text.fence-label[data-run="%d"]'); return e ? e.textContent : ""; })()`, id))
		if label != strconv.FormatInt(f, 10) {
			t.Errorf("%s: run %d labelled %q, want its fence %d", how, id, label, f)
		}
	}
	overlap := fmt.Sprintf(`document.querySelector('#timeline rect.overlap[data-run="%d"][data-successor="%d"]')`, x.runA, x.runB)
	if !eval[bool](t, ctx, overlap+` !== null`) {
		t.Fatalf("%s: no overlap of run %d with its successor %d", how, x.runA, x.runB)
	}
	// The overlap spans from B's start to B's end (A went on beyond it).
	geom := eval[[]float64](t, ctx, fmt.Sprintf(`(function () { var o = %s, a = %s, b = %s;
  return [+o.getAttribute("x"), +o.getAttribute("width"), +a.getAttribute("x"), +a.getAttribute("width"), +b.getAttribute("x"), +b.getAttribute("width")]; })()`, overlap, bar(x.runA), bar(x.runB)))
	ox, ow, ax, aw, bx, bw := geom[0], geom[1], geom[2], geom[3], geom[4], geom[5]
	if d := ox - bx; d < -0.5 || d > 0.5 || ow < bw-1 || ax+aw <= bx+bw {
		t.Errorf("%s: overlap x=%.1f w=%.1f; A x=%.1f w=%.1f, B x=%.1f w=%.1f: want the overlap from B's start to B's end, and A ending after B", how, ox, ow, ax, aw, bx, bw)
	}
	if !eval[bool](t, ctx, `document.querySelector("#timeline line.mark.takeover") !== null`) {
		t.Errorf("%s: no takeover mark", how)
	}
	colours := eval[[]string](t, ctx, fmt.Sprintf(`[%s, %s, %s].map(function (e) { return getComputedStyle(e).fill; })`, bar(x.runA), bar(x.runB), bar(x.failed)))
	if colours[0] == colours[1] || colours[1] == colours[2] || colours[0] == colours[2] {
		t.Errorf("%s: abandoned, succeeded and failed bars are coloured %q: want three colours", how, colours)
	}
}

// TestBrowserTimeline loads the page on each database with JavaScript
// disabled and enabled and checks the timeline's SVG; with JavaScript the
// timeline follows the ledger without a reload; the per-lease view draws
// one lease. On SQLite it takes a screenshot (into docs/img/timeline.png
// with FENCE_UPDATE_SCREENSHOT=1).
func TestBrowserTimeline(t *testing.T) {
	eachSerial(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		// The browsers start first, so that run C has not been running
		// long when the screenshot is taken.
		bctx, console := browser(t)
		nctx, ncancel := chromedp.NewContext(bctx)
		defer ncancel()
		if err := chromedp.Do(nctx); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(nctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatal(err)
		}
		x := stageTakeover(t, s)
		srv := httptest.NewServer(ops.Handler(s, ops.WithRefresh(200*time.Millisecond)))
		defer srv.Close()

		// JavaScript on.
		if err := chromedp.Do(bctx, chromedp.EmulateViewport(1100, 900), chromedp.Navigate(srv.URL+"/")); err != nil {
			t.Fatal(err)
		}
		if b.Name == "sqlite" {
			shot, err := chromedp.Run(bctx, chromedp.Screenshot(chromedp.CSS("figure")))
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(shot))
			if err != nil {
				t.Fatalf("the screenshot is not a PNG: %v", err)
			}
			if r := img.Bounds(); r.Dx() < 600 || r.Dy() < 100 {
				t.Errorf("the timeline's screenshot is %v: too small to read", r)
			}
			out := filepath.Join(t.TempDir(), "timeline.png")
			if os.Getenv("FENCE_UPDATE_SCREENSHOT") == "1" {
				out = filepath.Join("..", "..", "docs", "img", "timeline.png")
				if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(out, shot, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot: %s", out)
		}
		waitFor(t, bctx, "the live status", `document.getElementById("status").textContent.slice(0, 4)`, "live")
		checkTimeline(t, bctx, x, "with JavaScript")

		// JavaScript off: the server's SVG is the whole story.
		if err := chromedp.Do(nctx, chromedp.Navigate(srv.URL+"/")); err != nil {
			t.Fatal(err)
		}
		checkTimeline(t, nctx, x, "without JavaScript")

		// C finishes: the open page redraws C's bar without a reload.
		eval[bool](t, bctx, `window.fenceTestMark = true`)
		if err := s.FinishRun(context.Background(), x.c.Token, x.runC, fence.Completion{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, bctx, "run C's bar after it finished",
			fmt.Sprintf(`(function () { var e = document.querySelector('#timeline rect.bar[data-run="%d"]'); return e ? e.getAttribute("class") : ""; })()`, x.runC),
			"bar succeeded")
		if !eval[bool](t, bctx, `window.fenceTestMark === true`) {
			t.Error("the page was reloaded; it should update in place")
		}

		// The per-lease view: one row, every run of that lease.
		if err := chromedp.Do(nctx, chromedp.Navigate(srv.URL+"/?lease=hourly-sync")); err != nil {
			t.Fatal(err)
		}
		if n := eval[int](t, nctx, `document.querySelectorAll("#timeline g.lease").length`); n != 1 {
			t.Errorf("?lease=hourly-sync: %d lease rows in the timeline, want 1", n)
		}
		if got := eval[string](t, nctx, `document.querySelector("#timeline g.lease").dataset.lease`); got != "hourly-sync" {
			t.Errorf("?lease=hourly-sync draws %q", got)
		}
		if n := eval[int](t, nctx, `document.querySelectorAll("#runs tbody tr").length`); n != 1 {
			t.Errorf("?lease=hourly-sync lists %d runs, want 1", n)
		}
		console.check(t)
	})
}

// labelOverlapsJS lists, from the boxes the browser drew, each fence label
// that overlaps another label or a bar other than its own run's.
const labelOverlapsJS = `(function () {
  function box(e) { var r = e.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom, run: e.getAttribute("data-run")}; }
  function meet(a, b) { return a.l < b.r - 0.5 && b.l < a.r - 0.5 && a.t < b.b - 0.5 && b.t < a.b - 0.5; }
  var labels = Array.prototype.map.call(document.querySelectorAll("#timeline text.fence-label"), box);
  var bars = Array.prototype.map.call(document.querySelectorAll("#timeline rect.bar"), box);
  var out = [];
  labels.forEach(function (a, i) {
    labels.slice(i + 1).forEach(function (b) { if (meet(a, b)) { out.push("label of run " + a.run + " overlaps the label of run " + b.run); } });
    bars.forEach(function (b) { if (b.run !== a.run && meet(a, b)) { out.push("label of run " + a.run + " overlaps the bar of run " + b.run); } });
  });
  return out;
})()`

// Fences are 16 digits (the database clock in microseconds): on a burst of
// short runs, some a stale run's overlap, no fence label may cover another
// or another run's bar, as a person sees the page (measured by Chromium,
// with and without the page's script, at two widths). Labels that have no
// room are left out; the bar's title still has the fence.
func TestBrowserTimelineLabelsDoNotOverlap(t *testing.T) {
	eachSerial(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		ctx := context.Background()
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		bctx, console := browser(t)
		var prev fence.Lease
		var prevRun int64
		for i := range 14 {
			l, err := s.Acquire(ctx, "burst", time.Minute)
			if errors.Is(err, fence.ErrHeld) {
				_, err = s.Revoke(ctx, "burst")
				must(err)
				l, err = s.Acquire(ctx, "burst", time.Minute)
			}
			must(err)
			id, err := s.StartRun(ctx, l.Token, nil)
			must(err)
			if prevRun != 0 {
				// Every third run outlives its successor's start.
				_ = s.FinishRun(ctx, prev.Token, prevRun, fence.Completion{})
			}
			prev, prevRun = fence.Lease{}, 0
			waitDB(t, s, 40*time.Millisecond)
			if i%3 == 2 {
				prev, prevRun = l, id
				continue
			}
			must(s.FinishRun(ctx, l.Token, id, fence.Completion{}))
			must(s.Release(ctx, l.Token))
			waitDB(t, s, 15*time.Millisecond)
		}
		srv := httptest.NewServer(ops.Handler(s))
		defer srv.Close()
		for _, width := range []int64{1100, 700} {
			if err := chromedp.Do(bctx, chromedp.EmulateViewport(width, 900), chromedp.Navigate(srv.URL+"/")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, bctx, "the live status", `document.getElementById("status").textContent.slice(0, 4)`, "live")
			if n := eval[int](t, bctx, `document.querySelectorAll("#timeline text.fence-label").length`); n == 0 {
				t.Fatalf("width %d: no fence labels at all", width)
			}
			for _, o := range eval[[]string](t, bctx, labelOverlapsJS) {
				t.Errorf("width %d: %s", width, o)
			}
		}
		console.check(t)
	})
}
