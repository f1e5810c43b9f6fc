package fenceprom

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencekit/fence"
)

// A run's duration, by how it ended, the time of the last success and the
// runs in progress, on the local clock.
func TestJobMetrics(t *testing.T) {
	ctx := t.Context()
	m, clk := newMetrics()
	s := open(t, m)
	run := func(d time.Duration, jobErr error) {
		t.Helper()
		l, err := s.Acquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		id, err := s.StartRun(ctx, l.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		expect(t, m, `fence_jobs_running{lease="job"} 1`, "fence_jobs_running")
		clk.Add(d)
		if err := s.FinishRun(ctx, l.Token, id, fence.Completion{Err: jobErr}); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l.Token); err != nil {
			t.Fatal(err)
		}
	}
	run(90*time.Second, nil)
	run(3*time.Second, errors.New("boom"))
	expect(t, m, `
		fence_jobs_running{lease="job"} 0
		fence_job_last_success_timestamp_seconds{lease="job"} 1.00009e+06
		fence_job_duration_seconds_count{lease="job",status="succeeded"} 1
		fence_job_duration_seconds_count{lease="job",status="failed"} 1
		fence_run_starts_total{lease="job"} 2
	`, "fence_jobs_running", "fence_job_last_success_timestamp_seconds", "fence_job_duration_seconds",
		"fence_run_starts_total")
	for status, want := range map[string]float64{"succeeded": 90, "failed": 3} {
		if got := durationSum(t, m, status); got != want {
			t.Errorf("fence_job_duration_seconds_sum{status=%q} = %v, want %v", status, got, want)
		}
	}
	lint(t, m)
}

// durationSum is the sum of fence_job_duration_seconds{status}.
func durationSum(t *testing.T, m *Metrics, status string) float64 {
	t.Helper()
	o, err := m.jobDur.GetMetricWithLabelValues("job", status)
	if err != nil {
		t.Fatal(err)
	}
	var d dto.Metric
	if err := o.(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleSum()
}

// A runner that stops its job at the renew deadline is counted as an
// "unproven" loss without OnLost, even when the database is gone and the
// run cannot be marked.
func TestRunnerUnprovenWithoutOnLost(t *testing.T) {
	ctx := t.Context()
	m, _ := newMetrics()
	s := open(t, m)
	job := func(ctx context.Context) error {
		s.DB().Close() // every renewal fails from now on, none is refused
		<-ctx.Done()
		return ctx.Err()
	}
	r, err := fence.Run(ctx, s, "nightly", job, fence.WithTTL(2*time.Second),
		fence.WithRenewEvery(20*time.Millisecond), fence.WithRenewDeadline(300*time.Millisecond))
	if err != nil || r.Outcome != fence.Lost || !errors.Is(r.Err, fence.ErrUnproven) {
		t.Fatalf("run: %+v, %v; want lost, unproven", r, err)
	}
	expect(t, m, `
		fence_leases_lost_total{lease="nightly",reason="unproven"} 1
		fence_jobs_running{lease="nightly"} 0
		fence_job_duration_seconds_count{lease="nightly",status="lost"} 1
	`, "fence_leases_lost_total", "fence_jobs_running", "fence_job_duration_seconds")
}
