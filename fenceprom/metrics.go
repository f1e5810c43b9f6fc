package fenceprom

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencekit/fence"
)

// Metrics records a store's lease operations as Prometheus metrics. Give it
// to the store with fence.WithObserver and register it with a
// prometheus.Registerer. It is safe for concurrent use, and one Metrics may
// observe several stores.
type Metrics struct {
	leaseLabel bool
	now        func() time.Time // local monotonic clock; replaced in tests

	acquire   *prometheus.CounterVec
	renew     *prometheus.HistogramVec
	renewFail *prometheus.CounterVec
	lost      *prometheus.CounterVec
	writes    *prometheus.CounterVec
	starts    *prometheus.CounterVec
	finished  *prometheus.CounterVec
	jobDur    *prometheus.HistogramVec
	running   *prometheus.GaugeVec
	success   *prometheus.GaugeVec

	heldDesc, fenceDesc, expiryDesc *prometheus.Desc

	mu   sync.Mutex
	held map[string]holding // by lease name
	// lostFence is, per lease name, the highest fence whose loss was
	// counted, so that one loss seen by several refused operations (a
	// renewal, then the runner's release) counts once.
	lostFence map[string]int64
	// started is, per run id, the run this process started and has not
	// seen finish or be marked lost.
	started map[int64]startedRun
}

// startedRun is a run this process started.
type startedRun struct {
	lease string // label value
	at    time.Time
}

// holding is a lease this process holds.
type holding struct {
	fence    int64
	deadline time.Time // local monotonic time the lease can first lapse
}

// Option configures Metrics.
type Option func(*config)

type config struct {
	leaseLabel bool
	buckets    []float64
	jobBuckets []float64
}

// DefaultJobBuckets are the buckets of fence_job_duration_seconds: 100ms
// to 6 hours.
var DefaultJobBuckets = []float64{0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 21600}

// WithoutLeaseLabel aggregates every lease into series with lease="", for a
// process that holds many lease names (one per tenant or shard). See the
// package documentation on cardinality.
func WithoutLeaseLabel() Option { return func(c *config) { c.leaseLabel = false } }

// WithRenewBuckets sets the buckets of fence_renew_duration_seconds, in
// seconds (default prometheus.DefBuckets, 5ms to 10s).
func WithRenewBuckets(b []float64) Option { return func(c *config) { c.buckets = b } }

// WithJobBuckets sets the buckets of fence_job_duration_seconds, in seconds
// (default DefaultJobBuckets).
func WithJobBuckets(b []float64) Option { return func(c *config) { c.jobBuckets = b } }

// New returns Metrics with every metric at zero.
func New(opts ...Option) *Metrics {
	c := config{leaseLabel: true, buckets: prometheus.DefBuckets, jobBuckets: DefaultJobBuckets}
	for _, o := range opts {
		o(&c)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{"lease"}, labels...))
	}
	return &Metrics{
		leaseLabel: c.leaseLabel,
		now:        time.Now,
		acquire: counter("fence_acquire_total",
			"Lease acquire attempts by outcome: acquired, held (by another owner) or error.", "outcome"),
		renew: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fence_renew_duration_seconds",
			Help:    "Duration of lease renewal calls, whatever their result.",
			Buckets: c.buckets,
		}, []string{"lease"}),
		renewFail: counter("fence_renew_failures_total",
			"Lease renewals that failed, by reason: lost (refused, final) or error (database, retryable or not).", "reason"),
		lost: counter("fence_leases_lost_total",
			"Tokens of this process found to have lost their lease, once per lease and fence, by reason.", "reason"),
		writes: counter("fence_fenced_writes_total",
			"Fenced writes and fenced transaction checks by result: ok, stale (token lost), no_match (token valid, no row matched) or error.", "result"),
		starts: counter("fence_run_starts_total",
			"Runs this process started in the run ledger."),
		finished: counter("fence_runs_finished_total",
			"Runs this process ended in the run ledger, by status: succeeded, failed, or lost (completion refused as stale, or marked lost).", "status"),
		jobDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fence_job_duration_seconds",
			Help:    "Duration of the runs this process started, from the start of the run to its end (succeeded, failed or lost), by status.",
			Buckets: c.jobBuckets,
		}, []string{"lease", "status"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fence_jobs_running",
			Help: "Runs this process started and has not yet ended."}, []string{"lease"}),
		success: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fence_job_last_success_timestamp_seconds",
			Help: "Unix time at which a run this process started last succeeded."}, []string{"lease"}),
		heldDesc: prometheus.NewDesc("fence_leases_held",
			"Number of leases this process holds.", nil, nil),
		fenceDesc: prometheus.NewDesc("fence_lease_fence",
			"Fence of a lease this process holds.", []string{"lease"}, nil),
		expiryDesc: prometheus.NewDesc("fence_lease_expiry_seconds",
			"Seconds until a lease this process holds can first lapse, unless renewed (the soonest of all without the lease label).", []string{"lease"}, nil),
		held:      map[string]holding{},
		lostFence: map[string]int64{},
		started:   map[int64]startedRun{},
	}
}

// label is the lease label's value for name.
func (m *Metrics) label(name string) string {
	if m.leaseLabel {
		return name
	}
	return ""
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.acquire.Describe(ch)
	m.renew.Describe(ch)
	m.renewFail.Describe(ch)
	m.lost.Describe(ch)
	m.writes.Describe(ch)
	m.starts.Describe(ch)
	m.finished.Describe(ch)
	m.jobDur.Describe(ch)
	m.running.Describe(ch)
	m.success.Describe(ch)
	ch <- m.heldDesc
	if m.leaseLabel {
		ch <- m.fenceDesc
	}
	ch <- m.expiryDesc
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.acquire.Collect(ch)
	m.renew.Collect(ch)
	m.renewFail.Collect(ch)
	m.lost.Collect(ch)
	m.writes.Collect(ch)
	m.starts.Collect(ch)
	m.finished.Collect(ch)
	m.jobDur.Collect(ch)
	m.running.Collect(ch)
	m.success.Collect(ch)

	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var soonest time.Duration
	for name, h := range m.held {
		left := h.deadline.Sub(now)
		if left <= 0 {
			delete(m.held, name) // lapsed, as far as this process can tell
			continue
		}
		if m.leaseLabel {
			ch <- prometheus.MustNewConstMetric(m.fenceDesc, prometheus.GaugeValue, float64(h.fence), name)
			ch <- prometheus.MustNewConstMetric(m.expiryDesc, prometheus.GaugeValue, left.Seconds(), name)
		} else if soonest == 0 || left < soonest {
			soonest = left
		}
	}
	ch <- prometheus.MustNewConstMetric(m.heldDesc, prometheus.GaugeValue, float64(len(m.held)))
	if soonest > 0 {
		ch <- prometheus.MustNewConstMetric(m.expiryDesc, prometheus.GaugeValue, soonest.Seconds(), "")
	}
}

var (
	_ fence.Observer       = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)
