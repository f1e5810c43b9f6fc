package fenceprom

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

// A RenewBatch counts each token under its own lease, like a Renew would:
// the refused one as a failed renewal and a lost lease, the renewed one in
// the held gauges; the call itself is one sample with lease="".
func TestRenewBatchByLease(t *testing.T) {
	ctx := t.Context()
	m, clk := newMetrics()
	s := open(t, m)

	a, err := s.Acquire(ctx, "shard-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, "shard-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, "shard-b"); err != nil {
		t.Fatal(err)
	}
	clk.Add(30 * time.Second)
	errs, err := s.RenewBatch(ctx, []fence.Token{a.Token, b.Token}, 2*time.Minute)
	if err != nil || errs[0] != nil || !errors.Is(errs[1], fence.ErrLost) {
		t.Fatalf("batch: %v, %v", errs, err)
	}
	expect(t, m, `
		fence_renew_duration_seconds_count{lease=""} 1
		fence_renew_failures_total{lease="shard-b",reason="lost"} 1
		fence_leases_lost_total{lease="shard-b",reason="revoked"} 1
		fence_leases_held{} 1
		fence_lease_fence{lease="shard-a"} `+gauge(a.Token.Fence)+`
		fence_lease_expiry_seconds{lease="shard-a"} 120
	`, "fence_renew_duration_seconds", "fence_renew_failures_total", "fence_leases_lost_total",
		"fence_leases_held", "fence_lease_fence", "fence_lease_expiry_seconds")

	// The stale token refused again (by Renew) is the same one loss.
	if _, err := s.Renew(ctx, b.Token, time.Minute); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("renew after revoke: %v", err)
	}

	// A batch that fails as a whole fails the renewal of every token.
	if _, err := s.DB().ExecContext(ctx, `DROP TABLE fence_leases`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RenewBatch(ctx, []fence.Token{a.Token, b.Token}, time.Minute); err == nil {
		t.Fatal("batch without its table succeeded")
	}
	expect(t, m, `
		fence_renew_duration_seconds_count{lease=""} 2
		fence_renew_duration_seconds_count{lease="shard-b"} 1
		fence_renew_failures_total{lease="shard-a",reason="error"} 1
		fence_renew_failures_total{lease="shard-b",reason="error"} 1
		fence_renew_failures_total{lease="shard-b",reason="lost"} 2
		fence_leases_lost_total{lease="shard-b",reason="revoked"} 1
		fence_leases_held{} 1
	`, "fence_renew_duration_seconds", "fence_renew_failures_total", "fence_leases_lost_total", "fence_leases_held")
	lint(t, m)
}

// Store.MarkRunLost counts the run as lost under its lease, once.
func TestMarkRunLost(t *testing.T) {
	ctx := t.Context()
	m, _ := newMetrics()
	s := open(t, m)

	a, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.StartRun(ctx, a.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second finds the run no longer running
		if err := s.MarkRunLost(ctx, id, a.Token.Fence, "worker gave up"); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := s.GetRun(ctx, id); err != nil || r.Status != fence.RunLost {
		t.Fatalf("run: %+v, %v", r, err)
	}
	expect(t, m, `
		fence_run_starts_total{lease="job"} 1
		fence_runs_finished_total{lease="job",status="lost"} 1
		fence_jobs_running{lease="job"} 0
		fence_job_duration_seconds_count{lease="job",status="lost"} 1
	`, "fence_run_starts_total", "fence_runs_finished_total", "fence_jobs_running", "fence_job_duration_seconds")
	lint(t, m)
}

// The runner marks its run lost when a refused renewal stops the job; that
// run is counted as lost.
func TestRunnerMarksRunLost(t *testing.T) {
	ctx := t.Context()
	m, _ := newMetrics()
	s := open(t, m)

	job := func(ctx context.Context) error {
		if _, err := s.Revoke(context.WithoutCancel(ctx), "nightly"); err != nil {
			return err
		}
		<-ctx.Done() // stopped by the refused renewal
		return ctx.Err()
	}
	// The renewal that sees the revoke comes within 20 ms; the mark that
	// follows gets a call timeout of its own (by default the renew
	// interval, 20 ms, which a loaded machine overran: the run was left
	// unmarked and the lost count missing).
	r, err := fence.Run(ctx, s, "nightly", job, fence.WithTTL(time.Minute), fence.WithRenewEvery(20*time.Millisecond),
		fence.WithCallTimeout(30*time.Second))
	if err != nil || r.Outcome != fence.Lost {
		t.Fatalf("run: %+v, %v", r, err)
	}
	expect(t, m, `
		fence_run_starts_total{lease="nightly"} 1
		fence_runs_finished_total{lease="nightly",status="lost"} 1
		fence_leases_lost_total{lease="nightly",reason="revoked"} 1
	`, "fence_run_starts_total", "fence_runs_finished_total", "fence_leases_lost_total")
	lint(t, m)
}
