package fenceprom

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencekit/fence"
)

// StoreCollector exports what the database knows of every lease and run,
// read at each scrape: where Metrics sees one process's operations, a
// StoreCollector sees the whole store (fence serve registers one). Register
// it with a prometheus.Registerer; it is safe for concurrent use. Each
// scrape is two statements (Store.Stats), bounded by a timeout, and
// concurrent scrapes take turns, so a collector uses at most one of the
// store's connections.
type StoreCollector struct {
	store     *fence.Store
	maxLeases int
	timeout   time.Duration
	onError   func(error)
	turn      chan struct{}

	state, fence, expiry, holder, lastSuccess *prometheus.Desc
	leases, omitted, runs, lost               *prometheus.Desc
	scrapeErr, scrapeDur                      *prometheus.Desc
}

// StoreOption configures a StoreCollector.
type StoreOption func(*StoreCollector)

// DefaultMaxLeases is how many leases a StoreCollector exports by default.
const DefaultMaxLeases = 1000

// WithMaxLeases bounds the leases exported, the first n by name (default
// DefaultMaxLeases): each costs about 8 series. fence_db_leases counts them
// all and fence_db_leases_omitted those left out.
func WithMaxLeases(n int) StoreOption { return func(c *StoreCollector) { c.maxLeases = max(n, 0) } }

// WithScrapeTimeout bounds the database read of one scrape (default 5s).
func WithScrapeTimeout(d time.Duration) StoreOption {
	return func(c *StoreCollector) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithScrapeErrorFunc calls f with the error of each failed scrape, to log
// it (the scrape itself only says fence_db_scrape_error 1).
func WithScrapeErrorFunc(f func(error)) StoreOption { return func(c *StoreCollector) { c.onError = f } }

// NewStoreCollector returns a collector of store's leases and run ledger.
func NewStoreCollector(store *fence.Store, opts ...StoreOption) *StoreCollector {
	c := &StoreCollector{store: store, maxLeases: DefaultMaxLeases, timeout: 5 * time.Second,
		onError: func(error) {}, turn: make(chan struct{}, 1)}
	for _, o := range opts {
		o(c)
	}
	lease := []string{"lease"}
	c.state = prometheus.NewDesc("fence_db_lease_state",
		"State of a lease by the database clock: 1 for its state (held, expired, released, revoked), 0 for the others.", []string{"lease", "state"}, nil)
	c.fence = prometheus.NewDesc("fence_db_lease_fence",
		"Current fence of a lease. It rises at each acquisition and revoke (to at least the database clock in microseconds), so changes() of it counts new holders.", lease, nil)
	c.expiry = prometheus.NewDesc("fence_db_lease_expiry_seconds",
		"Seconds until a lease lapses by the database clock, negative once it has; absent when released or revoked.", lease, nil)
	c.holder = prometheus.NewDesc("fence_db_lease_holder_info",
		"Holder name of a held lease (fence.WithHolder; never the owner token), always 1.", []string{"lease", "holder"}, nil)
	c.lastSuccess = prometheus.NewDesc("fence_db_lease_last_success_age_seconds",
		"Seconds since the lease's last succeeded run finished, by the database clock; absent until one has.", lease, nil)
	c.leases = prometheus.NewDesc("fence_db_leases",
		"Number of lease rows in the store.", nil, nil)
	c.omitted = prometheus.NewDesc("fence_db_leases_omitted",
		"Leases not exported per lease because of the lease limit (fence serve --metrics-max-leases).", nil, nil)
	c.runs = prometheus.NewDesc("fence_db_runs",
		"Runs in the ledger by status (running, succeeded, failed, lost, abandoned); pruning lowers it.", []string{"status"}, nil)
	c.lost = prometheus.NewDesc("fence_db_lost_runs",
		"Lost and abandoned runs in the ledger by reason, derived from the ledger's text (see fence.LossReasons); reason=\"rejected\" are stale completions the ledger refused.", []string{"reason"}, nil)
	c.scrapeErr = prometheus.NewDesc("fence_db_scrape_error",
		"1 if this scrape could not read the database (no other fence_db_ series then), else 0.", nil, nil)
	c.scrapeDur = prometheus.NewDesc("fence_db_scrape_duration_seconds",
		"Time this scrape took to read the database.", nil, nil)
	return c
}

// Describe implements prometheus.Collector.
func (c *StoreCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.state, c.fence, c.expiry, c.holder, c.lastSuccess,
		c.leases, c.omitted, c.runs, c.lost, c.scrapeErr, c.scrapeDur} {
		ch <- d
	}
}

var (
	leaseStates = []fence.State{fence.StateHeld, fence.StateExpired, fence.StateReleased, fence.StateRevoked}
	runStatuses = []fence.RunStatus{fence.RunRunning, fence.RunSucceeded, fence.RunFailed, fence.RunLost, fence.RunAbandoned}
)

// Collect implements prometheus.Collector: it reads the store.
func (c *StoreCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	start := time.Now()
	st, err := c.read()
	gauge(c.scrapeDur, time.Since(start).Seconds())
	if err != nil {
		c.onError(err)
		gauge(c.scrapeErr, 1)
		return
	}
	gauge(c.scrapeErr, 0)
	gauge(c.leases, float64(st.LeaseCount))
	gauge(c.omitted, float64(max(st.LeaseCount-len(st.Leases), 0)))
	for _, l := range st.Leases {
		for _, s := range leaseStates {
			v := 0.0
			if l.State == s {
				v = 1
			}
			gauge(c.state, v, l.Name, string(s))
		}
		gauge(c.fence, float64(l.Fence), l.Name)
		if !l.ExpiresAt.IsZero() {
			gauge(c.expiry, l.ExpiresAt.Sub(st.DBNow).Seconds(), l.Name)
		}
		if l.Holder != "" {
			gauge(c.holder, 1, l.Name, l.Holder)
		}
		if !l.LastSuccess.IsZero() {
			gauge(c.lastSuccess, max(st.DBNow.Sub(l.LastSuccess).Seconds(), 0), l.Name)
		}
	}
	for _, s := range runStatuses {
		gauge(c.runs, float64(st.Runs[s]), string(s))
	}
	for _, r := range fence.LossReasons {
		gauge(c.lost, float64(st.Lost[r]), r)
	}
}

// read takes this collector's turn and reads the store, within the timeout.
func (c *StoreCollector) read() (fence.Stats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	select {
	case c.turn <- struct{}{}:
		defer func() { <-c.turn }()
	case <-ctx.Done():
		return fence.Stats{}, context.Cause(ctx)
	}
	return c.store.Stats(ctx, c.maxLeases)
}

var _ prometheus.Collector = (*StoreCollector)(nil)
