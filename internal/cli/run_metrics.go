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
			// Not quoted: a URL that does not parse may still carry a password.
			return usagef("give the Pushgateway's base URL, e.g. --metrics-push http://pushgateway:9091", "--metrics-push is not an http(s) URL with a host")
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
		token, err := readTokenFile("--metrics-token-file", o.metricsTokenFile)
		if err != nil {
			return nil, nil, err
		}
		s, err := serveMetrics(o.metricsAddr, token, reg, a.log)
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
				shown, msg := redactPushURL(o.metricsPush, err.Error())
				a.log.Warn("fence: pushing metrics failed", "url", shown, "err", msg)
				fmt.Fprintf(a.stderr, "fence: warning: --metrics-push: %s\n", msg)
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

// redactPushURL returns the Pushgateway URL raw with its password replaced
// by xxxxx, and msg (an error of the push, which quotes the URL it pushed
// to) with every form of that password replaced the same way.
func redactPushURL(raw, msg string) (shown, scrubbed string) {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)", strings.ReplaceAll(msg, raw, "(unparsable URL)")
	}
	shown = u.Redacted()
	msg = strings.ReplaceAll(msg, raw, shown)
	if pw, ok := u.User.Password(); ok && pw != "" {
		for _, f := range []string{pw, url.PathEscape(pw), url.QueryEscape(pw), url.UserPassword("", pw).String()[1:]} {
			msg = strings.ReplaceAll(msg, f, "xxxxx")
		}
	}
	return shown, msg
}

// readTokenFile reads a bearer token from path ("" without one).
func readTokenFile(flag, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usagef("give a readable file holding the token", "%s: %v", flag, err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", usagef("write a random token into it, e.g. openssl rand -hex 32 > "+path, "%s %s is empty", flag, path)
	}
	return t, nil
}
