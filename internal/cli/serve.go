package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/fencekit/fence/internal/ops"
)

const serveLong = `Serve a read-only operations page on --addr: the leases (holder, fence, time
left by the database clock), recent runs with status and duration, and stale
rejections (runs marked lost or abandoned, with the reason). The page
refreshes its tables every second and loads nothing from elsewhere.

Also served: /healthz (200 "ok" while the database answers, else 503),
/metrics (Prometheus: this process's Go runtime; lease metrics belong to the
processes that hold leases, see 'fence run --metrics-addr'), /api/leases and
/api/runs (JSON).

The page has no authentication; keep --addr on loopback or a trusted
network. SIGINT or SIGTERM stops the server gracefully.`

// shutdownTimeout bounds the wait for open requests on SIGINT/SIGTERM.
const shutdownTimeout = 10 * time.Second

func (a *app) serveCmd() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:     "serve [--addr HOST:PORT]",
		Short:   "Serve a read-only web page of leases, runs and stale rejections",
		Long:    serveLong,
		Example: "  fence serve\n  fence serve --addr 0.0.0.0:8080 --dsn postgres://app@db:5432/app",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			s, err := a.open(ctx, true)
			if err != nil {
				return err
			}
			defer s.Close()
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return usagef("use a free HOST:PORT, e.g. --addr 127.0.0.1:8081", "--addr: %v", err)
			}
			srv := &http.Server{
				Handler:           ops.Handler(s, ops.WithMetrics(promhttp.Handler()), ops.WithLogger(a.log)),
				ReadHeaderTimeout: 5 * time.Second,
				ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
			}
			fmt.Fprintf(a.stderr, "fence serve: http://%s/ (%s, prefix %s); Ctrl-C stops\n", ln.Addr(), a.parsed.Redacted, a.prefix)
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				return fmt.Errorf("shutting down: %w", err)
			}
			if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "listen `address` HOST:PORT")
	return cmd
}
