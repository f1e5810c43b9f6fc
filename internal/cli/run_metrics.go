package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/push"
	"github.com/prometheus/common/expfmt"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fenceprom"
)

// pushJob is the Pushgateway job name of fence run's metrics; the group is
// also keyed by the host and the lease (as fence_lease: the metrics carry
// their own lease label), so that runs of different leases or hosts do not
// replace each other's metrics.
const pushJob = "fence_run"

// pushTimeout bounds the push after the command ended.
const pushTimeout = 10 * time.Second

// validateMetrics checks --metrics-push and --metrics-textfile before any
// lease is taken.
func (o runOpts) validateMetrics() error {
	if o.metricsPush != "" {
		u, err := url.Parse(o.metricsPush)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("give the Pushgateway's base URL, e.g. --metrics-push http://pushgateway:9091", "--metrics-push %q is not an http(s) URL", o.metricsPush)
		}
	}
	if p := o.metricsTextfile; p != "" {
		if !strings.HasSuffix(p, ".prom") {
			return usagef("name it NAME.prom in node exporter's --collector.textfile.directory", "--metrics-textfile %q: node exporter's textfile collector reads only *.prom files", p)
		}
		if fi, err := os.Stat(filepath.Dir(p)); err != nil || !fi.IsDir() {
			return usagef("create the directory, or use node exporter's --collector.textfile.directory", "--metrics-textfile: directory %q does not exist", filepath.Dir(p))
		}
	}
	return nil
}

// runMetrics sets up the metrics of one fence run: a fenceprom.Metrics
// observing the store, served at --metrics-addr while the command runs,
// and, once it has ended, pushed to --metrics-push and written to
// --metrics-textfile. It returns the store options to observe with and a
// function that ends it all, to call after the run (nil options and a
// no-op without any of the flags). A failed push or write is logged: the
// command's outcome stands.
func (a *app) runMetrics(o runOpts) ([]fence.Option, func(), error) {
	if o.metricsAddr == "" && o.metricsPush == "" && o.metricsTextfile == "" {
		return nil, func() {}, nil
	}
	m := fenceprom.New()
	stop := func() {}
	if o.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		s, err := serveMetrics(o.metricsAddr, reg, a.log)
		if err != nil {
			return nil, nil, err
		}
		stop = s
	}
	// Pushed and written: the lease metrics only. A Pushgateway or node
	// exporter keeps them after this process is gone, when its runtime
	// metrics mean nothing (and node exporter has go_* series of its own).
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	done := func() {
		stop()
		if o.metricsPush != "" {
			if err := pushMetrics(o.metricsPush, o.lease, reg); err != nil {
				a.log.Warn("fence: pushing metrics failed", "url", o.metricsPush, "err", err)
				fmt.Fprintf(a.stderr, "fence: warning: --metrics-push: %v\n", err)
			}
		}
		if o.metricsTextfile != "" {
			// WriteToTextfile writes a temporary file in the same directory
			// (not *.prom, so node exporter skips it) and renames it over
			// the target: a scrape sees the old file or the new one whole.
			if err := prometheus.WriteToTextfile(o.metricsTextfile, reg); err != nil {
				a.log.Warn("fence: writing the metrics textfile failed", "path", o.metricsTextfile, "err", err)
				fmt.Fprintf(a.stderr, "fence: warning: --metrics-textfile: %v\n", err)
			}
		}
	}
	return []fence.Option{fence.WithObserver(m)}, done, nil
}

// pushMetrics replaces this host's and lease's group on the Pushgateway at
// base with g's metrics (HTTP PUT, text format).
func pushMetrics(base, lease string, g prometheus.Gatherer) error {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	ctx, cancel := context.WithTimeout(context.Background(), pushTimeout)
	defer cancel()
	return push.New(base, pushJob).
		Grouping("instance", host).
		Grouping("fence_lease", lease).
		Client(&http.Client{Timeout: pushTimeout}).
		Format(expfmt.NewFormat(expfmt.TypeTextPlain)).
		Gatherer(g).
		PushContext(ctx)
}
