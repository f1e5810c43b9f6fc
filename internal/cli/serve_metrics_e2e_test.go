package cli

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// e2eHolder is the holder name of the stores openBackend opens.
const e2eHolder = "metrics-e2e:1"

// openBackend opens a store on b's database and tables, for tests that set
// up a scenario through the library.
func openBackend(t *testing.T, b *backend) *fence.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := fencedsn.Open(ctx, b.dsn, fence.WithPrefix(b.prefix), fence.WithHolder(e2eHolder))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fence serve's /metrics reads every lease and the run ledger from the
// database: after a takeover, a stale completion, a sweep and a loss of each
// kind, the fence_db_ series say exactly what the ledger holds.
func TestServeMetricsFromDatabase(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := openBackend(t, b)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		acquire := func(name string, ttl time.Duration) fence.Token {
			t.Helper()
			l, err := s.Acquire(ctx, name, ttl)
			must(err)
			return l.Token
		}
		start := func(tok fence.Token) int64 {
			t.Helper()
			id, err := s.StartRun(ctx, tok, nil)
			must(err)
			return id
		}

		// "job": a first generation succeeds; a second starts, is revoked
		// and taken over by a fourth, whose run abandons the second's.
		a1 := acquire("job", time.Minute)
		must(s.FinishRun(ctx, a1, start(a1), fence.Completion{}))
		must(s.Release(ctx, a1))
		a2 := acquire("job", time.Minute)
		stale := start(a2)
		_, err := s.Revoke(ctx, "job")
		must(err)
		b4 := acquire("job", time.Minute)
		start(b4)
		if err := s.FinishRun(ctx, a2, stale, fence.Completion{}); !errors.Is(err, fence.ErrLost) {
			t.Fatalf("stale completion of an abandoned run: %v, want ErrLost", err)
		}

		// "other": a completion refused while its run is still running is
		// recorded as rejected; then a run stopped at the renew deadline,
		// and one given up with a reason of the caller's own.
		o1 := acquire("other", time.Minute)
		r := start(o1)
		_, err = s.Revoke(ctx, "other")
		must(err)
		if err := s.FinishRun(ctx, o1, r, fence.Completion{}); !errors.Is(err, fence.ErrLost) {
			t.Fatalf("stale completion: %v, want ErrLost", err)
		}
		o2 := acquire("other", time.Minute)
		must(s.MarkRunLost(ctx, start(o2), o2.Fence, (&fence.UnprovenError{Token: o2, Deadline: time.Second}).Error()))
		must(s.MarkRunLost(ctx, start(o2), o2.Fence, "worker gave up"))
		must(s.Release(ctx, o2))

		// "swept": its run's generation ends by revoke, and a sweep marks it.
		w := acquire("swept", time.Minute)
		start(w)
		_, err = s.Revoke(ctx, "swept")
		must(err)
		if n, err := s.SweepRuns(ctx); err != nil || n != 1 {
			t.Fatalf("sweep: %d, %v; want 1 run", n, err)
		}
		// "short" lapses by the database clock.
		acquire("short", 20*time.Millisecond)

		// The limit takes the first leases by name and still counts all.
		st, err := s.Stats(ctx, 2)
		must(err)
		if st.LeaseCount != 4 || len(st.Leases) != 2 || st.Leases[0].Name != "job" || st.Leases[1].Name != "other" {
			t.Fatalf("Stats(2): %d leases, %+v; want 4 counted, job and other", st.LeaseCount, st.Leases)
		}
		if st, err = s.Stats(ctx, 0); err != nil || st.LeaseCount != 4 || len(st.Leases) != 0 || st.Runs[fence.RunLost] != 4 {
			t.Fatalf("Stats(0): %+v, %v; want 4 counted, none read, 4 lost runs", st, err)
		}

		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(err)
		addr := ln.Addr().String()
		ln.Close()
		b.start(t, "serve", "--addr", addr)
		want := []string{
			`fence_db_scrape_error 0`,
			`fence_db_leases 4`,
			`fence_db_leases_omitted 0`,
			`fence_db_lease_fence{lease="job"} ` + promFloat(b4.Fence),
			`fence_db_lease_state{lease="job",state="held"} 1`,
			`fence_db_lease_state{lease="job",state="expired"} 0`,
			`fence_db_lease_holder_info{holder="` + e2eHolder + `",lease="job"} 1`,
			`fence_db_lease_state{lease="other",state="released"} 1`,
			`fence_db_lease_state{lease="swept",state="revoked"} 1`,
			`fence_db_lease_state{lease="short",state="expired"} 1`,
			`fence_db_runs{status="succeeded"} 1`,
			`fence_db_runs{status="running"} 1`,
			`fence_db_runs{status="abandoned"} 1`,
			`fence_db_runs{status="lost"} 4`,
			`fence_db_runs{status="failed"} 0`,
			`fence_db_lost_runs{reason="abandoned"} 1`,
			`fence_db_lost_runs{reason="rejected"} 1`,
			`fence_db_lost_runs{reason="unproven"} 1`,
			`fence_db_lost_runs{reason="other"} 1`,
			`fence_db_lost_runs{reason="swept"} 1`,
			`fence_db_lost_runs{reason="superseded"} 0`,
		}
		body := scrapeUntil(t, "http://"+addr+"/metrics", want)
		for _, bad := range []string{b4.Owner, a2.Owner, `lease="other",holder`, `fence_db_lease_holder_info{holder="` + e2eHolder + `",lease="` + w.Lease + `"`, b4.Owner[:8]} {
			if strings.Contains(body, bad) {
				t.Errorf("metrics contain %q:\n%s", bad, body)
			}
		}
		for _, l := range []string{`fence_db_lease_last_success_age_seconds{lease="job"} `, `fence_db_lease_expiry_seconds{lease="job"} `, `fence_db_lease_expiry_seconds{lease="short"} -`} {
			if !strings.Contains(body, l) {
				t.Errorf("metrics lack %q:\n%s", l, body)
			}
		}
		if strings.Contains(body, `fence_db_lease_last_success_age_seconds{lease="other"}`) || strings.Contains(body, `fence_db_lease_expiry_seconds{lease="swept"}`) {
			t.Errorf("a lease without success or expiry has a series:\n%s", body)
		}
	})
}

// promFloat is how the Prometheus text format writes n.
func promFloat(n int64) string { return strconv.FormatFloat(float64(n), 'g', -1, 64) }

// scrapeUntil fetches url until its body has every line of want, and
// returns it; it fails the test with the last body after 30 s.
func scrapeUntil(t *testing.T, url string, want []string) string {
	t.Helper()
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				missing = w
				break
			}
		}
		if missing == "" {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never showed %q:\n%s", missing, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
