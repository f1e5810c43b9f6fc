package ops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/fencekit/fence/internal/ops"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/task"
)

// chromium is Debian's chromium package (apt-get install chromium).
const chromium = "/usr/bin/chromium"

// browserTimeout bounds a whole browser test: start, every wait, and the
// browser's shutdown. Generous: the machine may be loaded, and the tests
// run one database at a time (see eachSerial).
const browserTimeout = 90 * time.Second

// browser starts a headless Chromium for t and returns a context for its
// first tab. The browser, its processes and its profile directory are gone
// when t ends. Without Chromium the test is skipped, or fails under
// FENCE_REQUIRE_DBS=1 (CI installs it).
func browser(t *testing.T) (context.Context, *consoleLog) {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		if testdb.Required() {
			t.Fatalf("browser test required (FENCE_REQUIRE_DBS=1) but %s is missing: %v; apt-get install chromium", chromium, err)
		}
		t.Skipf("SKIP browser test: %s is missing (apt-get install chromium); FENCE_REQUIRE_DBS=1 makes this a failure", chromium)
	}
	dir, err := os.MkdirTemp("", "fence-ops-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Chromium's helpers can still write to the profile for a moment
		// after the browser exits.
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("could not remove the browser profile %s", dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root in CI
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(dir),
	)
	t.Cleanup(acancel) // kills the browser if it is still there, and waits for it
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		// Close the browser gracefully, for at most 10s; acancel then
		// kills whatever is left.
		cctx, ccancel := context.WithTimeout(bctx, 10*time.Second)
		defer ccancel()
		_ = chromedp.Cancel(cctx)
		bcancel()
	})
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return bctx, watchConsole(bctx)
}

// consoleLog collects the page's uncaught exceptions and console errors
// (a Content-Security-Policy violation is one).
type consoleLog struct {
	mu   sync.Mutex
	msgs []string
}

func watchConsole(ctx context.Context) *consoleLog {
	c := &consoleLog{}
	msgs := chromedp.Console(ctx) // subscribes now; ends with ctx
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				c.mu.Lock()
				c.msgs = append(c.msgs, m.String())
				c.mu.Unlock()
			}
		}
	}()
	return c
}

func (c *consoleLog) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.msgs {
		t.Errorf("browser console: %s", m)
	}
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// leaseCell is a JS expression: the text of cell class cls in the lease
// row named name, or "" while there is no such row.
func leaseCell(name, cls string) string {
	return fmt.Sprintf(`(function () {
  var tr = Array.prototype.find.call(document.querySelectorAll("#leases tbody tr"), function (r) { return r.dataset.lease === %s; });
  var td = tr && tr.querySelector("td.%s");
  return td ? td.textContent : "";
})()`, js(name), cls)
}

// waitTimeout bounds one wait for the page, leaving time within
// browserTimeout to report what the page shows instead.
const waitTimeout = 30 * time.Second

// eachSerial runs fn per database, one after the other: three browsers at
// once on a small loaded machine make every wait a guess. PostgreSQL and
// MariaDB need FENCE_LONG=1 (.ci/run sets it): a browser run takes tens of
// seconds, and the page is the same over each database.
func eachSerial(t *testing.T, fn func(t *testing.T, b teststore.Backend)) {
	for _, b := range teststore.Backends {
		t.Run(b.Name, func(t *testing.T) {
			if b.Name != teststore.SQLite.Name {
				testdb.Long(t)
			}
			fn(t, b)
		})
	}
}

// waitFor polls expr until it evaluates to want, for at most waitTimeout.
func waitFor(t *testing.T, ctx context.Context, what, expr, want string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[string](fmt.Sprintf(`(%s) === %s ? "ok" : ""`, expr, js(want)),
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(waitTimeout)))
	if err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		st, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("status").textContent`))
		t.Fatalf("waiting for %s to be %q (it is %q; the page's status: %q): %v", what, want, got, st, err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// TestBrowserShowsTakeover loads the page in headless Chromium, sees a held
// lease, takes the lease over in Go and waits until the open page, without
// a reload, shows the new fence and holder, and the previous owner's run as
// abandoned. A second tab with JavaScript disabled shows the same state.
func TestBrowserShowsTakeover(t *testing.T) {
	eachSerial(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		ctx := context.Background()
		const name = "nightly-report"
		first, err := s.Acquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		run, err := s.StartRun(ctx, first.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, hostile, time.Minute); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(ops.Handler(s))
		defer srv.Close()

		bctx, console := browser(t)
		if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/")); err != nil {
			t.Fatal(err)
		}
		fence1 := strconv.FormatInt(first.Token.Fence, 10)
		waitFor(t, bctx, "the lease's fence", leaseCell(name, "fence"), fence1)
		if got := eval[string](t, bctx, leaseCell(name, "holder")); got != s.Holder() {
			t.Errorf("holder %q, want %q", got, s.Holder())
		}
		// Marks this document: a reload would lose the mark.
		eval[bool](t, bctx, `window.fenceTestMark = true`)

		// Takeover: an operator revokes, another worker acquires and starts
		// a run, which abandons the first owner's run.
		if _, err := s.Revoke(ctx, name); err != nil {
			t.Fatal(err)
		}
		second, err := s.Acquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartRun(ctx, second.Token, nil); err != nil {
			t.Fatal(err)
		}
		fence2 := strconv.FormatInt(second.Token.Fence, 10)
		waitFor(t, bctx, "the fence after the takeover", leaseCell(name, "fence"), fence2)
		if got := eval[string](t, bctx, leaseCell(name, "holder")); got != s.Holder() {
			t.Errorf("holder after the takeover %q, want %q", got, s.Holder())
		}
		if !eval[bool](t, bctx, `window.fenceTestMark === true`) {
			t.Error("the page was reloaded; it should update in place")
		}
		waitFor(t, bctx, "the first owner's run in stale rejections",
			fmt.Sprintf(`(function () { var td = document.querySelector('#stale tr[data-run="%d"] td.status'); return td ? td.textContent : ""; })()`, run),
			"abandoned")
		if got := eval[string](t, bctx, `document.getElementById("status").textContent`); !strings.HasPrefix(got, "live · db time ") {
			t.Errorf("status %q, want live", got)
		}
		checkSeen(t, bctx, "with JavaScript")

		// The hostile name is text in the live-updated table, and none of
		// its markup ran or became elements.
		if got := eval[string](t, bctx, leaseCell(hostile, "name")); got != hostile {
			t.Errorf("hostile lease name shown as %q", got)
		}
		if eval[bool](t, bctx, `window.pwned !== undefined || document.querySelectorAll("table img, table script").length > 0`) {
			t.Error("markup in a lease name ran or became elements")
		}

		// Without JavaScript the page is complete on load.
		nctx, ncancel := chromedp.NewContext(bctx)
		defer ncancel()
		if err := chromedp.Do(nctx); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(nctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(nctx, chromedp.Navigate(srv.URL+"/")); err != nil {
			t.Fatal(err)
		}
		if got := eval[string](t, nctx, leaseCell(name, "fence")); got != fence2 {
			t.Errorf("without JavaScript: fence %q, want %q", got, fence2)
		}
		if got := eval[string](t, nctx, leaseCell(hostile, "name")); got != hostile {
			t.Errorf("without JavaScript: hostile lease name shown as %q", got)
		}
		if got := eval[string](t, nctx, `document.getElementById("status").textContent`); strings.HasPrefix(got, "live") {
			t.Errorf("the script ran with JavaScript disabled (status %q)", got)
		}
		checkSeen(t, nctx, "without JavaScript")
		console.check(t)
	})
}

// seenLayout is what a person sees of the page's structure, read from the
// rendered document: the visible section headings (without their counts),
// text the browser put directly in <body> (a stray fragment shows there),
// and per table its visible header cells and, per body row, how many
// columns its cells span.
type seenLayout struct {
	Headings []string `json:"headings"`
	Stray    []string `json:"stray"`
	Tables   []struct {
		ID     string   `json:"id"`
		Header []string `json:"header"`
		Rows   []int    `json:"rows"`
	} `json:"tables"`
}

const seenLayoutJS = `(function () {
  function visible(e) { var r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== "hidden"; }
  function own(e) { var c = e.cloneNode(true); c.querySelectorAll(".count").forEach(function (x) { x.remove(); }); return c.textContent.trim(); }
  var out = {headings: [], stray: [], tables: []};
  document.querySelectorAll("h2").forEach(function (h) { if (visible(h)) { out.headings.push(own(h)); } });
  document.body.childNodes.forEach(function (n) { if (n.nodeType === 3 && n.textContent.trim()) { out.stray.push(n.textContent.trim()); } });
  document.querySelectorAll("table").forEach(function (t) {
    var head = [], rows = [];
    t.querySelectorAll("thead th").forEach(function (th) { if (visible(th)) { head.push(th.textContent.trim()); } });
    t.querySelectorAll("tbody tr").forEach(function (tr) {
      var n = 0;
      Array.prototype.forEach.call(tr.cells, function (c) { n += c.colSpan; });
      rows.push(n);
    });
    out.tables.push({id: t.id, header: head, rows: rows});
  });
  return out;
})()`

// checkSeen asserts what a person sees: each section once, in order, no
// stray text, and each table with its header row, every row as wide.
func checkSeen(t *testing.T, ctx context.Context, how string) {
	t.Helper()
	l := eval[seenLayout](t, ctx, seenLayoutJS)
	want := []string{"Leases", "Timeline", "Recent runs", "Stale rejections"}
	if strings.Join(l.Headings, "|") != strings.Join(want, "|") {
		t.Errorf("%s: the sections a person sees are %q, want %q once each", how, l.Headings, want)
	}
	for _, s := range l.Stray {
		t.Errorf("%s: stray text on the page: %q", how, s)
	}
	headers := map[string]string{
		"leases": "Name|State|Holder|Fence|Expires in",
		"runs":   "Run|Kind|Lease|Holder|Fence|Status|Started|Duration|Exit|Error",
		"stale":  "Run|Lease|Fence|Status|Ended|Reason",
	}
	seen := map[string]bool{}
	for _, tb := range l.Tables {
		if seen[tb.ID] {
			t.Errorf("%s: table %q shown twice", how, tb.ID)
		}
		seen[tb.ID] = true
		if got := strings.Join(tb.Header, "|"); got != headers[tb.ID] {
			t.Errorf("%s: table %q has the header %q, want %q", how, tb.ID, got, headers[tb.ID])
		}
		for i, n := range tb.Rows {
			if n != len(tb.Header) {
				t.Errorf("%s: table %q row %d spans %d columns, its header %d", how, tb.ID, i+1, n, len(tb.Header))
			}
		}
	}
	for id := range headers {
		if !seen[id] {
			t.Errorf("%s: no table %q", how, id)
		}
	}
}

// TestBrowserShowsEpochTakeover: an open page follows a task's epochs
// without a reload: epoch A runs, a replan supersedes it, and the page's
// epochs table and timeline show epoch B running and A superseded.
// SQLite only: the page is the same over each database, and
// TestPageShowsTaskEpochs reads the epochs on all three.
func TestBrowserShowsEpochTakeover(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s := teststore.SQLite.Open(t)
		ctx := context.Background()
		ts, err := task.New(s)
		if err != nil {
			t.Fatal(err)
		}
		const id = "refund-7"
		if err := ts.Create(ctx, id, task.Plan{Model: "scripted"}); err != nil {
			t.Fatal(err)
		}
		a, err := ts.Start(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// A superseded epoch shows by what it wrote (an epoch that wrote
		// nothing leaves no row once superseded).
		if _, err := ts.RecordStep(ctx, a, "look-up", "found"); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(ops.Handler(s))
		defer srv.Close()
		bctx, console := browser(t)
		if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/")); err != nil {
			t.Fatal(err)
		}
		state := func(epoch int64) string {
			return fmt.Sprintf(`(function () { var td = document.querySelector('#epochs tr[data-epoch="%d"] td.status'); return td ? td.textContent : ""; })()`, epoch)
		}
		waitFor(t, bctx, "epoch A running", state(a.Number()), "running")
		eval[bool](t, bctx, `window.fenceTestMark = true`)
		bEp, err := ts.Replan(ctx, id, task.Plan{Model: "replanned"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, bctx, "epoch B running", state(bEp.Number()), "running")
		waitFor(t, bctx, "epoch A superseded", state(a.Number()), "superseded")
		waitFor(t, bctx, "epoch B's bar on the timeline",
			fmt.Sprintf(`(function () { var r = document.querySelector('#epochline rect.bar.epoch[data-fence="%d"]'); return r ? r.getAttribute("data-status") : ""; })()`, bEp.Number()),
			"running")
		if !eval[bool](t, bctx, `window.fenceTestMark === true`) {
			t.Error("the page was reloaded; it should update in place")
		}
		console.check(t)
	})
}
