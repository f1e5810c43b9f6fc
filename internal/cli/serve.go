package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fenceprom"
	"github.com/fencekit/fence/internal/ops"
)

const serveLong = `Serve a read-only operations page on --addr: the leases (holder, fence, time
left by the database clock), a timeline of the runs per lease (bars by status
labelled with their fence; a stale run still going after its successor
started is hatched), recent runs with status and duration, and stale
rejections (runs marked lost or abandoned, with the reason). ?lease=NAME
shows one lease. Leases and runs come 50 at a time, with links to the next
ones. The page refreshes every second, fetching only what changed, reads the
same without JavaScript, and loads nothing from elsewhere.

Also served: /healthz (200 "ok" while the database answers, else 503
"database unavailable"; the reason goes to the log), /metrics (Prometheus,
read from the database at each scrape: every lease's state, fence, expiry,
holder and time since its last succeeded run, the runs by status and the
lost runs by reason, as fence_db_* series; at most --metrics-max-leases
leases, fence_db_leases_omitted counts the rest; a failed read shows as
fence_db_scrape_error 1), /api/leases and /api/runs (JSON, paged: ?limit=
up to 500, ?after=NAME, ?before=RUN_ID; an ETag makes an unchanged refresh
a 304 without a body), /api/timeline (SVG), /api/epochs (JSON) and
/api/epochs/timeline (SVG): the epochs of package task's tasks, which the
page draws like runs once there are tasks.
Owner tokens are shown by their first 8 characters only: the full token and
the fence would let anyone act as the holder.

On a loopback --addr (the default) the server answers only requests whose
Host is localhost, 127.0.0.1, [::1] or the --addr host (421 otherwise), so a
web page cannot reach it through DNS rebinding. Any other --addr, including
0.0.0.0, needs a bearer token of at least 16 characters, from --token-file
or FENCE_SERVE_TOKEN: every request but /healthz must then send it as
"Authorization: Bearer TOKEN" (a browser asks for it as the password of a
login prompt). The server speaks plain HTTP; put TLS in front of it on a
network.

The server bounds itself: at most --max-conns connections (the longest-idle
one is closed to make room), --max-requests requests at once (503 beyond;
/healthz has a cap of 4 of its own, so a flood of other requests does not
fail the health probe),
read, write and idle timeouts, and a database pool of 4 connections.
SIGINT or SIGTERM stops the server gracefully.`

// shutdownTimeout bounds the wait for open requests on SIGINT/SIGTERM.
const shutdownTimeout = 10 * time.Second

// servePool is the database pool of fence serve: every request reads, so
// a flood of requests must wait for one of a few connections rather than
// take a shared database's connection slots.
const servePool = 4

// healthzRequests caps the /healthz requests served at once, apart from
// --max-requests.
const healthzRequests = 4

// serveLimits are the server's caps; tests lower them.
type serveLimits struct {
	conns, requests int
	readHeader      time.Duration
	read, write     time.Duration
	idle            time.Duration
}

var defaultServeLimits = serveLimits{conns: 512, requests: 32,
	readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second, idle: 30 * time.Second}

// newServer is fence serve's http.Server and listener for h on ln: Host
// check and token (ops.Guard), request and connection caps, timeouts. The
// write timeout exceeds ops' 5 s database timeout, so a slow read still
// answers 503 rather than a cut connection.
func newServer(h http.Handler, ln net.Listener, addr, token string, lim serveLimits, log *slog.Logger) (*http.Server, net.Listener, error) {
	// /healthz has a cap of its own: a flood of page or API requests must
	// not make the server look dead to its health probe.
	mux := http.NewServeMux()
	mux.Handle("/healthz", ops.LimitRequests(h, healthzRequests))
	mux.Handle("/", ops.LimitRequests(h, lim.requests))
	g, err := ops.Guard(mux, addr, token)
	if err != nil {
		return nil, nil, err
	}
	cl, state := ops.LimitConns(ln, lim.conns)
	return &http.Server{
		Handler:           g,
		ReadHeaderTimeout: lim.readHeader,
		ReadTimeout:       lim.read,
		WriteTimeout:      lim.write,
		IdleTimeout:       lim.idle,
		MaxHeaderBytes:    16 << 10,
		ConnState:         state,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}, cl, nil
}

// serveToken reads the bearer token from --token-file, else from
// FENCE_SERVE_TOKEN; "" when neither is set.
func (a *app) serveToken(file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(a.getenv("FENCE_SERVE_TOKEN")), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usagef("give a readable file holding the token", "--token-file: %v", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", usagef("write a random token into it, e.g. openssl rand -hex 32 > "+file, "--token-file %s is empty", file)
	}
	return t, nil
}

func (a *app) serveCmd() *cobra.Command {
	var addr, tokenFile string
	maxLeases := fenceprom.DefaultMaxLeases
	lim := defaultServeLimits
	cmd := &cobra.Command{
		Use:   "serve [--addr HOST:PORT] [--token-file PATH]",
		Short: "Serve a read-only web page of leases, runs and stale rejections",
		Long:  serveLong,
		Example: "  fence serve\n" +
			"  # on a network: a token is required, and TLS belongs in front\n" +
			"  openssl rand -hex 32 > /etc/fence/serve.token\n" +
			"  fence serve --addr 0.0.0.0:8080 --token-file /etc/fence/serve.token --dsn postgres://app@db:5432/app",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if lim.idle < time.Second {
				return usagef("e.g. --idle-timeout 30s", "--idle-timeout %v is below 1s", lim.idle)
			}
			token, err := a.serveToken(tokenFile)
			if err != nil {
				return err
			}
			// Refuse a bad --addr/token pair before touching the database.
			if _, err := ops.Guard(http.NotFoundHandler(), addr, token); err != nil {
				return usagef("openssl rand -hex 32 > serve.token, then --token-file serve.token (and TLS in front)", "%s", strings.TrimPrefix(err.Error(), fence.ErrInvalid.Error()+": "))
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			s, err := a.open(ctx, true, fence.WithMaxOpenConns(servePool))
			if err != nil {
				return err
			}
			defer s.Close()
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return usagef("use a free HOST:PORT, e.g. --addr 127.0.0.1:8081", "--addr: %v", err)
			}
			h := ops.Handler(s, ops.WithMetrics(a.serveMetricsHandler(s, maxLeases)), ops.WithLogger(a.log))
			srv, ln, err := newServer(h, ln, addr, token, lim, a.log)
			if err != nil {
				ln.Close()
				return err
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
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "listen `address` HOST:PORT; a non-loopback one needs a token")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "read the bearer token from `file` (default: $FENCE_SERVE_TOKEN)")
	cmd.Flags().IntVar(&lim.conns, "max-conns", lim.conns, "most open connections")
	cmd.Flags().IntVar(&maxLeases, "metrics-max-leases", maxLeases, "most leases exported one by one on /metrics (about 8 series each)")
	cmd.Flags().IntVar(&lim.requests, "max-requests", lim.requests, "most requests served at once; more get 503")
	cmd.Flags().DurationVar(&lim.idle, "idle-timeout", lim.idle, "close a keep-alive connection idle this `long` (keep it above a proxy's own)")
	return cmd
}
