package ops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/ops"
	"github.com/fencekit/fence/internal/teststore"
)

type leasesPage struct {
	DBNow  string `json:"db_now"`
	Leases []struct {
		Name, State, Holder, Owner string
	}
	Next string
}

type runsPage struct {
	Runs []struct {
		ID     int64
		Status string
	}
	Next int64
}

func getJSON(t *testing.T, u string, v any) *http.Response {
	t.Helper()
	resp, body := get(t, u)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %s %s", u, resp.Status, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v\n%s", u, err, body)
	}
	return resp
}

// TestPaging walks /api/leases and /api/runs by their cursors and the
// page's links: every lease and run once, pages within their limits.
func TestPaging(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		ctx := context.Background()
		var names []string
		var runs []int64
		for i := range 7 {
			name := fmt.Sprintf("job-%02d", i)
			names = append(names, name)
			l, err := s.Acquire(ctx, name, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			id, err := s.StartRun(ctx, l.Token, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.FinishRun(ctx, l.Token, id, fence.Completion{}); err != nil {
				t.Fatal(err)
			}
			runs = append([]int64{id}, runs...)
		}
		srv := httptest.NewServer(ops.Handler(s, ops.WithRunLimit(3), ops.WithLeaseLimit(3)))
		defer srv.Close()

		var seen []string
		after := ""
		for range 5 {
			var p leasesPage
			getJSON(t, srv.URL+"/api/leases?after="+url.QueryEscape(after), &p)
			if len(p.Leases) > 3 {
				t.Fatalf("a page of %d leases; the limit is 3", len(p.Leases))
			}
			for _, l := range p.Leases {
				seen = append(seen, l.Name)
			}
			if p.Next == "" {
				break
			}
			after = p.Next
		}
		if !slices.Equal(seen, names) {
			t.Errorf("/api/leases pages gave %q, want %q", seen, names)
		}
		var big leasesPage
		getJSON(t, srv.URL+"/api/leases?limit=500", &big)
		if len(big.Leases) != 7 || big.Next != "" {
			t.Errorf("?limit=500: %d leases, next %q; want all 7 and no next", len(big.Leases), big.Next)
		}

		var ids []int64
		before := int64(0)
		for range 5 {
			var p runsPage
			getJSON(t, srv.URL+"/api/runs?before="+strconv.FormatInt(before, 10), &p)
			for _, r := range p.Runs {
				ids = append(ids, r.ID)
			}
			if p.Next == 0 {
				break
			}
			before = p.Next
		}
		if !slices.Equal(ids, runs) {
			t.Errorf("/api/runs pages gave %v, want %v", ids, runs)
		}

		// The page links the next pages, keeping the other cursor.
		_, page := get(t, srv.URL+"/")
		next := `href="?after=job-02"`
		older := fmt.Sprintf(`href="?before=%d"`, runs[2])
		if !strings.Contains(page, next) || !strings.Contains(page, older) {
			t.Errorf("the page lacks %s or %s", next, older)
		}
		_, page = get(t, srv.URL+"/?after=job-02&before="+strconv.FormatInt(runs[2], 10))
		for _, want := range []string{`data-lease="job-03"`, `data-run="` + strconv.FormatInt(runs[3], 10) + `"`,
			`href="?before=` + strconv.FormatInt(runs[2], 10) + `"`, // first leases, same runs
			`href="?after=job-02"`, // newest runs, same leases
			`data-leases-url="api/leases?after=job-02&amp;limit=3"`} {
			if !strings.Contains(page, want) {
				t.Errorf("the second page lacks %s", want)
			}
		}
		if strings.Contains(page, `data-lease="job-00"`) {
			t.Error("the second page of leases shows the first")
		}
	})
}

// TestUnchangedRefreshIs304: with the ETag of its last answer, a refresh
// of an unchanged page gets 304 and no body, with the database clock in a
// header; a change gives 200 and a new ETag.
func TestUnchangedRefreshIs304(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		ctx := context.Background()
		l, err := s.Acquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartRun(ctx, l.Token, nil); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(ops.Handler(s))
		defer srv.Close()
		for _, p := range []string{"/api/leases", "/api/runs"} {
			resp, _ := get(t, srv.URL+p)
			etag := resp.Header.Get("ETag")
			if resp.StatusCode != http.StatusOK || etag == "" {
				t.Fatalf("GET %s = %s, ETag %q", p, resp.Status, etag)
			}
			waitDB(t, s, 20*time.Millisecond) // the countdowns change; the content does not
			code, n, hdr := conditional(t, srv.URL+p, etag)
			if code != http.StatusNotModified || n != 0 || hdr.Get("X-Fence-DB-Now") == "" {
				t.Errorf("unchanged GET %s with If-None-Match = %d, %d bytes, X-Fence-DB-Now %q; want 304, 0, the clock", p, code, n, hdr.Get("X-Fence-DB-Now"))
			}
		}
		resp, _ := get(t, srv.URL+"/api/leases")
		etag := resp.Header.Get("ETag")
		if err := s.Release(ctx, l.Token); err != nil {
			t.Fatal(err)
		}
		if code, n, hdr := conditional(t, srv.URL+"/api/leases", etag); code != http.StatusOK || n == 0 || hdr.Get("ETag") == etag {
			t.Errorf("GET /api/leases after a release = %d, %d bytes, ETag %q (was %q); want 200 and a new ETag", code, n, hdr.Get("ETag"), etag)
		}
	})
}

func conditional(t *testing.T, u, etag string) (int, int, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("If-None-Match", etag)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, len(b), resp.Header
}

// TestNoHolderUnlessHeld: released and expired leases show no holder, on
// the page and in /api/leases; a held one shows its holder, never the
// whole owner token.
func TestNoHolderUnlessHeld(t *testing.T) {
	s := teststore.SQLite.Open(t)
	ctx := context.Background()
	held, err := s.Acquire(ctx, "held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := s.Acquire(ctx, "released", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, rel.Token); err != nil {
		t.Fatal(err)
	}
	exp, err := s.Acquire(ctx, "expired", fence.MinTTL)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if l, err := s.Get(ctx, "expired"); err != nil {
			t.Fatal(err)
		} else if l.State == fence.StateExpired {
			break
		}
		time.Sleep(10 * time.Millisecond) // polls the lease's state
	}
	srv := httptest.NewServer(ops.Handler(s))
	defer srv.Close()
	var p leasesPage
	getJSON(t, srv.URL+"/api/leases", &p)
	for _, l := range p.Leases {
		wantHolder, wantOwner := "", ""
		if l.Name == "held" {
			wantHolder, wantOwner = s.Holder(), held.Token.Owner[:8]
		}
		if l.Holder != wantHolder || l.Owner != wantOwner {
			t.Errorf("%s (%s): holder %q owner %q, want %q and %q", l.Name, l.State, l.Holder, l.Owner, wantHolder, wantOwner)
		}
	}
	_, page := get(t, srv.URL+"/")
	for _, tok := range []string{held.Token.Owner, rel.Token.Owner[:8], exp.Token.Owner[:8]} {
		if strings.Contains(page, tok) {
			t.Errorf("the page shows %q: a whole token, or the holder of a lease nobody holds", tok)
		}
	}
}

// TestBadParameters: a bad cursor, lease or limit is a 400 that quotes it
// escaped, not a database error and not markup.
func TestBadParameters(t *testing.T) {
	srv := httptest.NewServer(ops.Handler(teststore.SQLite.Open(t)))
	defer srv.Close()
	for _, q := range []string{"lease=%3Cb%3E%01", "before=-1", "before=x", "limit=0", "limit=501", "after=%00", "lease=a&lease=b"} {
		for _, p := range []string{"/", "/api/leases", "/api/runs", "/api/timeline"} {
			resp, body := get(t, srv.URL+p+"?"+q)
			if resp.StatusCode != http.StatusBadRequest || strings.Contains(body, "<b>") {
				t.Errorf("GET %s?%s = %s %q; want 400 without markup", p, q, resp.Status, body)
			}
		}
	}
}
