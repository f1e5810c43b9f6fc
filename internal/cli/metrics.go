package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fenceprom"
	"github.com/fencekit/fence/internal/ops"
)

// metricsRequests caps the scrapes of --metrics-addr served at once.
const metricsRequests = 4

// serveMetrics serves reg at http://addr/metrics until stop is called,
// guarded as fence serve is (ops.Guard): on a loopback address only
// requests for localhost, 127.0.0.1, [::1] or addr's host are answered
// (DNS rebinding), and any other address needs token, which every scrape
// must send as "Authorization: Bearer TOKEN". It listens before returning,
// so a bad or busy address, or an open one without a token, fails before
// the lease is taken.
func serveMetrics(addr, token string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}))
	g, err := ops.Guard(ops.LimitRequests(mux, metricsRequests), addr, token)
	if err != nil {
		return nil, usagef("bind 127.0.0.1:PORT, or give --metrics-token-file FILE (openssl rand -hex 32 > FILE) and scrape with that bearer token",
			"--metrics-addr: %s", strings.TrimPrefix(err.Error(), fence.ErrInvalid.Error()+": "))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usagef("use HOST:PORT or :PORT with a free port", "--metrics-addr: %v", err)
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Warn("fence: metrics server stopped", "addr", addr, "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// serveMetricsHandler is fence serve's /metrics: this process's runtime and
// the store's leases and runs, read from the database at each scrape
// (fenceprom.StoreCollector) through the server's own small pool.
func (a *app) serveMetricsHandler(s *fence.Store, maxLeases int) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		fenceprom.NewStoreCollector(s, fenceprom.WithMaxLeases(maxLeases),
			fenceprom.WithScrapeErrorFunc(func(err error) {
				a.log.Warn("fence serve: metrics: reading the store failed", "err", err)
			})))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)})
}
