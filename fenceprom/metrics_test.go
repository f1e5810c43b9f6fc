package fenceprom

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// clock is a settable local clock, so seconds-to-expiry is exact.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newMetrics(opts ...Option) (*Metrics, *clock) {
	m := New(opts...)
	c := &clock{t: time.Unix(1_000_000, 0)}
	m.now = c.Now
	return m, c
}

// open returns a migrated SQLite store observed by m, with a table "items"
// (id 1 present) for fenced writes.
func open(t *testing.T, m *Metrics) *fence.Store {
	t.Helper()
	ctx := t.Context()
	s, err := fencedsn.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "x.db"), fence.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO items VALUES (1, '')`); err != nil {
		t.Fatal(err)
	}
	return s
}

const update = `UPDATE items SET v = ? WHERE id = ? AND {{fence}}`

// samples gathers m through a pedantic registry (which checks that Collect
// matches Describe) and returns the samples of the named metrics, one
// `name{labels} value` line each, sorted; a histogram gives its _count.
func samples(t *testing.T, m *Metrics, names ...string) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, x := range mf.GetMetric() {
			var ls []string
			for _, l := range x.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name, v := mf.GetName(), 0.0
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v = x.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = x.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				name, v = name+"_count", float64(x.GetHistogram().GetSampleCount())
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %g", name, strings.Join(ls, ","), v))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func expect(t *testing.T, m *Metrics, want string, names ...string) {
	t.Helper()
	want = strings.TrimSpace(want)
	var ws []string
	for l := range strings.SplitSeq(want, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ws = append(ws, l)
		}
	}
	slices.Sort(ws)
	if got := samples(t, m, names...); got != strings.Join(ws, "\n") {
		t.Errorf("metrics %v:\n got:\n%s\nwant:\n%s", names, got, strings.Join(ws, "\n"))
	}
}

func lint(t *testing.T, m *Metrics) {
	t.Helper()
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestAcquireRenewRevokeLifecycle(t *testing.T) {
	ctx := t.Context()
	m, clk := newMetrics()
	s := open(t, m)

	a, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "job", time.Minute); !errors.Is(err, fence.ErrHeld) {
		t.Fatalf("second acquire: %v, want ErrHeld", err)
	}
	if _, err := s.Acquire(ctx, "job", 0); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("acquire with TTL 0: %v, want ErrInvalid", err)
	}
	expect(t, m, `
		fence_acquire_total{lease="job",outcome="acquired"} 1
		fence_acquire_total{lease="job",outcome="held"} 1
		fence_acquire_total{lease="job",outcome="error"} 1
		fence_leases_held{} 1
		fence_lease_fence{lease="job"} `+gauge(a.Token.Fence)+`
		fence_lease_expiry_seconds{lease="job"} 60
	`, "fence_acquire_total", "fence_leases_held", "fence_lease_fence", "fence_lease_expiry_seconds")

	// Seconds to expiry count down on the local clock, and a renewal
	// restarts them from the renewal's start.
	clk.Add(15 * time.Second)
	expect(t, m, `fence_lease_expiry_seconds{lease="job"} 45`, "fence_lease_expiry_seconds")
	if _, err := s.Renew(ctx, a.Token, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	expect(t, m, `
		fence_lease_expiry_seconds{lease="job"} 120
		fence_renew_duration_seconds_count{lease="job"} 1
	`, "fence_lease_expiry_seconds", "fence_renew_duration_seconds")

	// Fenced writes and a run while the lease is held.
	id, err := s.StartRun(ctx, a.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, a.Token, update, "x", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, a.Token, update, "x", 999); !errors.Is(err, fence.ErrNoMatch) {
		t.Fatalf("write of a missing row: %v, want ErrNoMatch", err)
	}

	// An operator revokes the lease: it is no longer held, and every later
	// refusal of the old token is the same one loss.
	if _, err := s.Revoke(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	expect(t, m, `fence_leases_held{} 0`, "fence_leases_held", "fence_lease_fence", "fence_lease_expiry_seconds")
	if _, err := s.Renew(ctx, a.Token, time.Minute); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("renew after revoke: %v, want ErrLost", err)
	}
	if _, err := s.Exec(ctx, a.Token, update, "y", 1); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("write after revoke: %v, want ErrLost", err)
	}
	if err := s.InTx(ctx, a.Token, func(*sql.Tx) error { return nil }); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("InTx after revoke: %v, want ErrLost", err)
	}
	if err := s.FinishRun(ctx, a.Token, id, fence.Completion{}); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("finish after revoke: %v, want ErrLost", err)
	}
	if err := s.Release(ctx, a.Token); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("release after revoke: %v, want ErrLost", err)
	}
	expect(t, m, `
		fence_renew_duration_seconds_count{lease="job"} 2
		fence_renew_failures_total{lease="job",reason="lost"} 1
		fence_leases_lost_total{lease="job",reason="revoked"} 1
		fence_fenced_writes_total{lease="job",result="ok"} 1
		fence_fenced_writes_total{lease="job",result="no_match"} 1
		fence_fenced_writes_total{lease="job",result="stale"} 2
		fence_run_starts_total{lease="job"} 1
		fence_runs_finished_total{lease="job",status="lost"} 1
		fence_leases_held{} 0
	`, "fence_renew_duration_seconds", "fence_renew_failures_total", "fence_leases_lost_total",
		"fence_fenced_writes_total", "fence_run_starts_total", "fence_runs_finished_total", "fence_leases_held", "fence_lease_fence")
	lint(t, m)
}

func TestLostReasons(t *testing.T) {
	ctx := t.Context()
	m, _ := newMetrics()
	s := open(t, m)
	acquire := func(name string, ttl time.Duration) fence.Token {
		t.Helper()
		l, err := s.Acquire(ctx, name, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return l.Token
	}
	renewLost := func(tok fence.Token) {
		t.Helper()
		if _, err := s.Renew(ctx, tok, time.Minute); !errors.Is(err, fence.ErrLost) {
			t.Fatalf("renew %v: %v, want ErrLost", tok, err)
		}
	}

	rel := acquire("released", time.Minute)
	if err := s.Release(ctx, rel); err != nil {
		t.Fatal(err)
	}
	renewLost(rel)

	exp := acquire("expired", 20*time.Millisecond)
	sup := acquire("superseded", 20*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // both lapse by the database clock
	renewLost(exp)
	sup2 := acquire("superseded", time.Minute)
	renewLost(sup)

	miss := acquire("missing", time.Minute)
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM fence_leases WHERE lease_name = 'missing'`); err != nil {
		t.Fatal(err)
	}
	renewLost(miss)

	// A runner's job stopped at the renew deadline is seen only through
	// OnLost; a loss the store already saw is not counted again.
	unp := acquire("unproven", time.Minute)
	m.OnLost(unp, &fence.UnprovenError{Token: unp, Deadline: 40 * time.Second})
	m.OnLost(sup, &fence.LostError{Lease: sup.Lease, Fence: sup.Fence, Reason: fence.LostSuperseded})

	expect(t, m, `
		fence_leases_lost_total{lease="released",reason="released"} 1
		fence_leases_lost_total{lease="expired",reason="expired"} 1
		fence_leases_lost_total{lease="superseded",reason="superseded"} 1
		fence_leases_lost_total{lease="missing",reason="missing"} 1
		fence_leases_lost_total{lease="unproven",reason="unproven"} 1
		fence_lease_fence{lease="superseded"} `+gauge(sup2.Fence)+`
		fence_leases_held{} 1
	`, "fence_leases_lost_total", "fence_lease_fence", "fence_leases_held")
	lint(t, m)
}

func TestRunsOfTheRunner(t *testing.T) {
	ctx := t.Context()
	m, _ := newMetrics()
	s := open(t, m)

	ok := func(ctx context.Context) error {
		tok, _ := fence.TokenFrom(ctx)
		_, err := s.Exec(ctx, tok, update, "done", 1)
		return err
	}
	if r, err := fence.Run(ctx, s, "nightly", ok); err != nil || r.Outcome != fence.Completed {
		t.Fatalf("run: %+v, %v", r, err)
	}
	failing := func(context.Context) error { return errors.New("boom") }
	if r, err := fence.Run(ctx, s, "nightly", failing); err != nil || r.Outcome != fence.Failed {
		t.Fatalf("failing run: %+v, %v", r, err)
	}

	// The exposition as a scrape sees it, help and type included.
	want := `
# HELP fence_run_starts_total Runs this process started in the run ledger.
# TYPE fence_run_starts_total counter
fence_run_starts_total{lease="nightly"} 2
# HELP fence_runs_finished_total Runs this process ended in the run ledger, by status: succeeded, failed, or lost (completion refused as stale, or marked lost).
# TYPE fence_runs_finished_total counter
fence_runs_finished_total{lease="nightly",status="failed"} 1
fence_runs_finished_total{lease="nightly",status="succeeded"} 1
# HELP fence_jobs_running Runs this process started and has not yet ended.
# TYPE fence_jobs_running gauge
fence_jobs_running{lease="nightly"} 0
# HELP fence_acquire_total Lease acquire attempts by outcome: acquired, held (by another owner) or error.
# TYPE fence_acquire_total counter
fence_acquire_total{lease="nightly",outcome="acquired"} 2
# HELP fence_fenced_writes_total Fenced writes and fenced transaction checks by result: ok, stale (token lost), no_match (token valid, no row matched) or error.
# TYPE fence_fenced_writes_total counter
fence_fenced_writes_total{lease="nightly",result="ok"} 1
# HELP fence_leases_held Number of leases this process holds.
# TYPE fence_leases_held gauge
fence_leases_held 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want),
		"fence_run_starts_total", "fence_runs_finished_total", "fence_jobs_running", "fence_acquire_total", "fence_fenced_writes_total", "fence_leases_held"); err != nil {
		t.Error(err)
	}
	lint(t, m)
}

func TestWithoutLeaseLabel(t *testing.T) {
	ctx := t.Context()
	m, clk := newMetrics(WithoutLeaseLabel())
	s := open(t, m)

	var toks []fence.Token
	for i, name := range []string{"tenant-1", "tenant-2", "tenant-3"} {
		l, err := s.Acquire(ctx, name, time.Duration(i+1)*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, l.Token)
	}
	s.Acquire(ctx, "tenant-1", time.Minute) // held
	clk.Add(10 * time.Second)
	if _, err := s.Revoke(ctx, "tenant-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx, toks[0], time.Minute); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("renew after revoke: %v", err)
	}
	errs, err := s.RenewBatch(ctx, toks, time.Minute)
	if err != nil || errs[0] == nil || errs[1] != nil {
		t.Fatalf("batch: %v, %v", errs, err)
	}

	// tenant-1 is revoked (its loss counted once, though both Renew and
	// RenewBatch were refused); the batch renewed the other two for 1m.
	expect(t, m, `
		fence_acquire_total{lease="",outcome="acquired"} 3
		fence_acquire_total{lease="",outcome="held"} 1
		fence_leases_lost_total{lease="",reason="revoked"} 1
		fence_renew_failures_total{lease="",reason="lost"} 2
		fence_renew_duration_seconds_count{lease=""} 2
		fence_leases_held{} 2
		fence_lease_expiry_seconds{lease=""} 60
	`, "fence_acquire_total", "fence_leases_lost_total", "fence_renew_failures_total",
		"fence_renew_duration_seconds", "fence_leases_held", "fence_lease_fence", "fence_lease_expiry_seconds")

	// A lease whose local deadline passed without renewal is no longer held.
	if _, err := s.Renew(ctx, toks[2], 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Minute)
	expect(t, m, `
		fence_leases_held{} 1
		fence_lease_expiry_seconds{lease=""} 60
	`, "fence_leases_held", "fence_lease_expiry_seconds")
	lint(t, m)
}

func TestConcurrentUse(t *testing.T) {
	ctx := t.Context()
	m := New()
	s := open(t, m)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 10 {
				l, err := s.Acquire(ctx, fmt.Sprint("c", i%2), time.Minute)
				if err == nil {
					s.Renew(ctx, l.Token, time.Minute)
					s.Release(ctx, l.Token)
				}
				testutil.CollectAndCount(m)
			}
		})
	}
	wg.Wait()
	if n := testutil.ToFloat64(m.acquire.WithLabelValues("c0", "acquired")) +
		testutil.ToFloat64(m.acquire.WithLabelValues("c0", "held")) +
		testutil.ToFloat64(m.acquire.WithLabelValues("c0", "error")); n != 20 {
		t.Fatalf("acquire attempts of c0: %v, want 20", n)
	}
	expect(t, m, `fence_leases_held{} 0`, "fence_leases_held")
}

// gauge is a fence as samples prints a gauge's value. Fences (the database
// clock in µs) are below 2^53, so the float64 of a Prometheus gauge holds
// them exactly.
func gauge(f int64) string {
	if float64(f) >= 1<<53 || int64(float64(f)) != f {
		panic(fmt.Sprintf("fence %d is not exact as a float64", f))
	}
	return fmt.Sprintf("%g", float64(f))
}
