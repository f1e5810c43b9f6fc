package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/ops"
	"github.com/fencekit/fence/internal/teststore"
)

// hostile is a lease name that is markup; the page must show it as text.
const hostile = `<script>window.pwned=1</script><img src=x onerror="window.pwned=2">&amp;'`

type fixture struct {
	store             *fence.Store
	job               fence.Lease // holds "nightly-report" after a takeover
	succeeded, failed int64
	lost, abandoned   int64
}

// populate makes one lease of every kind of row the page shows: a held
// lease taken over twice, a hostile name, and runs that succeeded, failed,
// were lost (completion rejected after a revoke) and abandoned (a newer
// owner started a run).
func populate(t *testing.T, s *fence.Store) fixture {
	t.Helper()
	ctx := context.Background()
	f := fixture{store: s}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.Acquire(ctx, hostile, time.Minute)
	must(err)
	f.succeeded, err = s.StartRun(ctx, h.Token, nil)
	must(err)
	zero := 0
	must(s.FinishRun(ctx, h.Token, f.succeeded, fence.Completion{ExitCode: &zero}))
	f.failed, err = s.StartRun(ctx, h.Token, nil)
	must(err)
	three := 3
	must(s.FinishRun(ctx, h.Token, f.failed, fence.Completion{Err: errors.New("<b>disk</b> full"), ExitCode: &three}))

	a, err := s.Acquire(ctx, "nightly-report", time.Minute)
	must(err)
	f.lost, err = s.StartRun(ctx, a.Token, nil)
	must(err)
	_, err = s.Revoke(ctx, "nightly-report")
	must(err)
	if err := s.FinishRun(ctx, a.Token, f.lost, fence.Completion{}); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("stale completion: %v, want ErrLost", err)
	}
	b, err := s.Acquire(ctx, "nightly-report", time.Minute)
	must(err)
	f.abandoned, err = s.StartRun(ctx, b.Token, nil)
	must(err)
	_, err = s.Revoke(ctx, "nightly-report")
	must(err)
	f.job, err = s.Acquire(ctx, "nightly-report", time.Minute)
	must(err)
	_, err = s.StartRun(ctx, f.job.Token, nil) // abandons b's run
	must(err)
	return f
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// section returns the HTML of the table with the id.
func section(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `<table id="`+id+`">`)
	if i < 0 {
		t.Fatalf("no table %s in the page", id)
	}
	j := strings.Index(page[i:], "</table>")
	return page[i : i+j]
}

func TestPage(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		f := populate(t, b.Open(t))
		srv := httptest.NewServer(ops.Handler(f.store))
		defer srv.Close()

		resp, page := get(t, srv.URL+"/")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET / = %s\n%s", resp.Status, page)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("Content-Type %q", ct)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'nonce-") {
			t.Errorf("Content-Security-Policy %q", csp)
		}
		for _, bad := range []string{"<script>window.pwned", "<img", "<b>disk"} {
			if strings.Contains(page, bad) {
				t.Errorf("the page contains unescaped %q", bad)
			}
		}
		for _, ext := range []string{"http://", "https://", "//cdn"} {
			if strings.Contains(page, ext) {
				t.Errorf("the page refers to an external asset (%q)", ext)
			}
		}

		leases := section(t, page, "leases")
		escaped := `&lt;script&gt;window.pwned=1&lt;/script&gt;&lt;img src=x onerror=&#34;window.pwned=2&#34;&gt;&amp;amp;&#39;`
		if !strings.Contains(leases, `<td class="name"><a href="?lease=%3cscript%3ewindow.pwned%3d1%3c%2fscript%3e%3cimg%20src%3dx%20onerror%3d%22window.pwned%3d2%22%3e%26amp%3b%27">`+escaped+`</a></td>`) {
			t.Errorf("the hostile lease name is not shown escaped:\n%s", leases)
		}
		row := `<tr data-lease="nightly-report"><td class="name"><a href="?lease=nightly-report">nightly-report</a></td><td class="state held">held</td>` +
			`<td class="holder">` + f.store.Holder() + `</td>` +
			`<td class="fence num">` + spans(f.job.Token.Fence) + `</td>`
		if !strings.Contains(leases, row) {
			t.Errorf("no row %s in\n%s", row, leases)
		}

		runs := section(t, page, "runs")
		for id, want := range map[int64]string{
			f.succeeded: `<td class="status succeeded">succeeded</td>`,
			f.failed:    `<td class="status failed">failed</td>`,
			f.lost:      `<td class="status lost">lost</td>`,
			f.abandoned: `<td class="status abandoned">abandoned</td>`,
		} {
			if !strings.Contains(runs, `<tr data-run="`+strconv.FormatInt(id, 10)+`"><td class="id num">`) || !strings.Contains(runs, want) {
				t.Errorf("run %d: no row with %s", id, want)
			}
		}
		if !strings.Contains(runs, `<td class="exit num">3</td><td class="err" title="&lt;b&gt;disk&lt;/b&gt; full">&lt;b&gt;disk&lt;/b&gt; full</td>`) {
			t.Errorf("the failed run's exit code and error are not shown:\n%s", runs)
		}
		if !strings.Contains(runs, "so far</td>") {
			t.Errorf("the running run has no running duration:\n%s", runs)
		}

		stale := section(t, page, "stale")
		for _, id := range []int64{f.lost, f.abandoned} {
			if !strings.Contains(stale, `data-run="`+strconv.FormatInt(id, 10)+`"`) {
				t.Errorf("stale rejections lack run %d:\n%s", id, stale)
			}
		}
		for _, id := range []int64{f.succeeded, f.failed} {
			if strings.Contains(stale, `data-run="`+strconv.FormatInt(id, 10)+`"`) {
				t.Errorf("stale rejections list run %d, which was not stale", id)
			}
		}
		if !strings.Contains(stale, "completion rejected") || !strings.Contains(stale, "superseded by fence") {
			t.Errorf("stale rejections do not say why:\n%s", stale)
		}
	})
}

func TestAPI(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		f := populate(t, b.Open(t))
		srv := httptest.NewServer(ops.Handler(f.store, ops.WithRunLimit(3)))
		defer srv.Close()

		resp, body := get(t, srv.URL+"/api/leases")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json; charset=utf-8" {
			t.Fatalf("GET /api/leases = %s %s", resp.Status, resp.Header.Get("Content-Type"))
		}
		if strings.Contains(body, "<") {
			t.Errorf("JSON carries a raw '<': %s", body)
		}
		var ls struct {
			DBNow  string `json:"db_now"`
			Leases []struct {
				Name, State, Owner string
				OwnerShort         string `json:"owner_short"`
				Fence              int64
				ExpiresInMs        *int64 `json:"expires_in_ms"`
				ExpiresIn          string `json:"expires_in"`
			}
		}
		if err := json.Unmarshal([]byte(body), &ls); err != nil {
			t.Fatal(err)
		}
		if _, err := time.Parse(time.RFC3339, ls.DBNow); err != nil {
			t.Errorf("db_now %q: %v", ls.DBNow, err)
		}
		if len(ls.Leases) != 2 {
			t.Fatalf("%d leases, want 2: %s", len(ls.Leases), body)
		}
		for _, l := range ls.Leases {
			if l.State != "held" || l.ExpiresInMs == nil || *l.ExpiresInMs <= 0 || *l.ExpiresInMs > 60000 || !strings.HasSuffix(l.ExpiresIn, "s") {
				t.Errorf("lease %q: state %s, expires in %v ms (%q); want held, within a minute", l.Name, l.State, l.ExpiresInMs, l.ExpiresIn)
			}
			if l.Name == "nightly-report" && (l.Fence != f.job.Token.Fence || l.Owner != f.job.Token.Owner[:8] || l.OwnerShort != l.Owner) {
				t.Errorf("nightly-report: fence %d owner %s, want %d %s", l.Fence, l.Owner, f.job.Token.Fence, f.job.Token.Owner)
			}
		}

		_, body = get(t, srv.URL+"/api/runs")
		var rs struct {
			Runs, Stale []struct {
				ID     int64
				Status string
				Error  string
			}
		}
		if err := json.Unmarshal([]byte(body), &rs); err != nil {
			t.Fatal(err)
		}
		if len(rs.Runs) != 3 {
			t.Errorf("%d runs with WithRunLimit(3): %s", len(rs.Runs), body)
		}
		if len(rs.Stale) != 2 || rs.Stale[0].ID != f.abandoned || rs.Stale[1].ID != f.lost ||
			rs.Stale[0].Status != "abandoned" || rs.Stale[1].Status != "lost" || rs.Stale[1].Error == "" {
			t.Errorf("stale = %+v, want run %d abandoned then run %d lost, with reasons", rs.Stale, f.abandoned, f.lost)
		}
	})
}

func TestEmptyStore(t *testing.T) {
	s := teststore.Backends[0].Open(t)
	srv := httptest.NewServer(ops.Handler(s))
	defer srv.Close()
	resp, page := get(t, srv.URL+"/")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / = %s", resp.Status)
	}
	for _, want := range []string{"No leases yet.", "No runs yet.", "No stale rejections.", "db time 20"} {
		if !strings.Contains(page, want) {
			t.Errorf("the empty page lacks %q", want)
		}
	}
	_, body := get(t, srv.URL+"/api/runs")
	if !strings.Contains(body, `"runs":[]`) || !strings.Contains(body, `"stale":[]`) {
		t.Errorf("empty lists are not [] in %s", body)
	}
}

// closedStore is a store whose database handle is closed: every read fails.
func closedStore(t *testing.T) *fence.Store {
	t.Helper()
	s, err := fencedsn.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "f.db"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return s
}

func TestHealthz(t *testing.T) {
	srv := httptest.NewServer(ops.Handler(teststore.Backends[0].Open(t)))
	defer srv.Close()
	if resp, body := get(t, srv.URL+"/healthz"); resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Errorf("healthz = %s %q, want 200 ok", resp.Status, body)
	}

	down := httptest.NewServer(ops.Handler(closedStore(t)))
	defer down.Close()
	if resp, body := get(t, down.URL+"/healthz"); resp.StatusCode != http.StatusServiceUnavailable || body != "database unavailable\n" {
		t.Errorf("healthz of a closed store = %s %q, want 503 unavailable", resp.Status, body)
	}
}

func TestDatabaseDown(t *testing.T) {
	srv := httptest.NewServer(ops.Handler(closedStore(t)))
	defer srv.Close()
	resp, page := get(t, srv.URL+"/")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(page, `<p class="error" id="error">The database did not answer (database unavailable)`) {
		t.Errorf("GET / with the database down = %s\n%s", resp.Status, page)
	}
	for _, p := range []string{"/api/leases", "/api/runs"} {
		resp, body := get(t, srv.URL+p)
		var e struct{ Error string }
		if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("GET %s = %s %s, want 503 with an error", p, resp.Status, body)
		}
	}
}

func TestMetrics(t *testing.T) {
	s := teststore.Backends[0].Open(t)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fence_up 1\n") })
	with := httptest.NewServer(ops.Handler(s, ops.WithMetrics(metrics)))
	defer with.Close()
	if resp, body := get(t, with.URL+"/metrics"); resp.StatusCode != http.StatusOK || body != "fence_up 1\n" {
		t.Errorf("/metrics = %s %q", resp.Status, body)
	}
	without := httptest.NewServer(ops.Handler(s))
	defer without.Close()
	if resp, _ := get(t, without.URL+"/metrics"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics without WithMetrics = %s, want 404", resp.Status)
	}
}

func TestRouting(t *testing.T) {
	h := ops.Handler(teststore.Backends[0].Open(t))
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/", 200},
		{"HEAD", "/", 200},
		{"GET", "/api/leases", 200},
		{"POST", "/", 405},
		{"DELETE", "/api/leases", 405},
		{"GET", "/index.html", 404},
		{"GET", "/api/leases/x", 404},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
		if w.Code != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.path, w.Code, tc.want)
		}
		if w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: no X-Content-Type-Options: nosniff", tc.method, tc.path)
		}
	}
}

func TestRefreshOption(t *testing.T) {
	s := teststore.Backends[0].Open(t)
	for _, tc := range []struct {
		opts []ops.Option
		want string
	}{
		{nil, `data-refresh-ms="1000"`},
		{[]ops.Option{ops.WithRefresh(250 * time.Millisecond)}, `data-refresh-ms="250"`},
		{[]ops.Option{ops.WithRefresh(time.Nanosecond)}, `data-refresh-ms="100"`},
	} {
		w := httptest.NewRecorder()
		ops.Handler(s, tc.opts...).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("page lacks %s", tc.want)
		}
	}
}

// TestMountedUnderPath: the page's script fetches by relative URL, so the
// handler works behind http.StripPrefix.
func TestMountedUnderPath(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", ops.Handler(teststore.Backends[0].Open(t))))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, page := get(t, srv.URL+"/ops/")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `data-leases-url="api/leases?limit=50"`) || !strings.Contains(page, `data-timeline-url="api/timeline?limit=50"`) {
		t.Fatalf("GET /ops/ = %s, or the script does not fetch relative to the page", resp.Status)
	}
	if resp, _ := get(t, srv.URL+"/ops/api/leases"); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /ops/api/leases = %s", resp.Status)
	}
}

// spans is a fence as the page renders it: digit groups of three from the
// right, one span each, which concatenate to the exact number.
func spans(f int64) string {
	d := strconv.FormatInt(f, 10)
	var b strings.Builder
	for i := 0; i < len(d); {
		n := (len(d)-i-1)%3 + 1
		b.WriteString("<span>" + d[i:i+n] + "</span>")
		i += n
	}
	return b.String()
}

// TestExpiredRunShowsLost: a run still marked running whose lease generation
// is gone (its worker died) is shown as lost, "lease expired, outcome
// unknown", on the page and in /api/runs — not as running for ever.
func TestExpiredRunShowsLost(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		ctx := context.Background()
		l, err := s.Acquire(ctx, "died", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		id, err := s.StartRun(ctx, l.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Revoke(ctx, "died"); err != nil { // its generation is gone; the ledger still says running
			t.Fatal(err)
		}
		srv := httptest.NewServer(ops.Handler(s))
		defer srv.Close()
		_, body := get(t, srv.URL+"/api/runs")
		var rs struct {
			Runs, Stale []struct {
				ID     int64
				Status string
				Error  string
			}
		}
		if err := json.Unmarshal([]byte(body), &rs); err != nil {
			t.Fatal(err)
		}
		if len(rs.Runs) != 1 || rs.Runs[0].ID != id || rs.Runs[0].Status != "lost" || rs.Runs[0].Error != ops.ExpiredOutcome {
			t.Errorf("runs = %+v, want run %d lost (%s)", rs.Runs, id, ops.ExpiredOutcome)
		}
		if len(rs.Stale) != 1 || rs.Stale[0].ID != id {
			t.Errorf("stale = %+v, want run %d", rs.Stale, id)
		}
		_, page := get(t, srv.URL+"/")
		if runs := section(t, page, "runs"); strings.Contains(runs, "running") || !strings.Contains(runs, ops.ExpiredOutcome) {
			t.Errorf("the page shows the dead run as running:\n%s", runs)
		}
		// The ledger is left as it was.
		if r, err := s.GetRun(ctx, id); err != nil || r.Status != fence.RunRunning {
			t.Errorf("ledger: %+v %v", r, err)
		}
	})
}
