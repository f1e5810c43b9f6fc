package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fenceprom"
)

// serveMetrics serves reg at http://addr/metrics until stop is called. It
// listens before returning, so a bad or busy address fails before the lease
// is taken.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usagef("use HOST:PORT or :PORT with a free port", "--metrics-addr: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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
