// Package ops is fence's operations page, served by `fence serve`: a small
// read-only web page of the store's leases (holder, fence, time left by the
// database clock), its recent runs and its stale rejections (runs marked
// lost or abandoned, with the reason), plus a liveness probe and, when
// given one, a metrics handler.
//
//	GET /             the page: server-rendered HTML, complete without
//	                  JavaScript; an inline script refreshes its tables
//	                  every second from the two endpoints below
//	GET /api/leases   {"db_now", "leases": [...]} as JSON
//	GET /api/runs     {"db_now", "runs": [...], "stale": [...]} as JSON
//	GET /healthz      200 "ok" when the database answers, else 503
//	                  "database unavailable"
//	GET /metrics      the handler given to WithMetrics (404 without one)
//
// The page loads nothing from elsewhere: its CSS and script are inline, and
// its Content-Security-Policy allows only them (by nonce) and requests to
// its own origin. Every value shown is escaped; lease names are user data.
// The handler never writes to the store. It serves no owner token beyond its
// first 8 characters and no database error text (that goes to the log). It
// has no authentication of its own: Guard adds the Host check and bearer
// token that `fence serve` uses, LimitConns and LimitRequests its caps. The page fetches its endpoints
// by relative URL, so it also works mounted under a path:
// mux.Handle("/ops/", http.StripPrefix("/ops", ops.Handler(store))).
package ops

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/fencekit/fence"
)

// Option configures Handler.
type Option func(*handler)

// WithMetrics serves h at /metrics, for example promhttp.Handler() or
// fenceprom's. Without it /metrics is 404.
func WithMetrics(h http.Handler) Option { return func(o *handler) { o.metrics = h } }

// WithRunLimit sets how many recent runs, and how many stale rejections,
// the page shows (default 50).
func WithRunLimit(n int) Option { return func(o *handler) { o.runLimit = n } }

// WithRefresh sets how often the page's script refreshes its tables
// (default 1s; at least 100ms).
func WithRefresh(d time.Duration) Option { return func(o *handler) { o.refresh = d } }

// WithTimeout bounds the database reads of one request (default 5s).
func WithTimeout(d time.Duration) Option { return func(o *handler) { o.timeout = d } }

// WithLogger logs failed database reads at warn level (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *handler) { o.log = l } }

type handler struct {
	store    *fence.Store
	metrics  http.Handler
	runLimit int
	refresh  time.Duration
	timeout  time.Duration
	log      *slog.Logger
	mux      *http.ServeMux
}

// Handler returns the operations page and its endpoints for store.
func Handler(store *fence.Store, opts ...Option) http.Handler {
	h := &handler{store: store, runLimit: 50, refresh: time.Second, timeout: 5 * time.Second,
		log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(h)
	}
	h.runLimit = max(h.runLimit, 1)
	h.refresh = max(h.refresh, 100*time.Millisecond)
	if h.timeout <= 0 {
		h.timeout = 5 * time.Second
	}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("GET /api/leases", h.apiLeases)
	h.mux.HandleFunc("GET /api/runs", h.apiRuns)
	h.mux.HandleFunc("GET /healthz", h.healthz)
	if h.metrics != nil {
		h.mux.Handle("/metrics", h.metrics)
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	h.mux.ServeHTTP(w, r)
}

func (h *handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.timeout)
}

// unavailable is all a reader of the page learns of a failed database read:
// the driver's text can name the database user, host and port, and the
// server's log has it (WithLogger).
const unavailable = "database unavailable"

func (h *handler) failed(r *http.Request, what string, err error) {
	h.log.WarnContext(r.Context(), "ops: reading the store failed", "what", what, "err", err)
}

func (h *handler) apiLeases(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	v, err := h.leases(ctx)
	if err != nil {
		h.failed(r, "leases", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": unavailable})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (h *handler) apiRuns(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	v, err := h.runs(ctx)
	if err != nil {
		h.failed(r, "runs", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": unavailable})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// encoding/json escapes <, > and & in strings, so even a response
	// mistaken for HTML carries no markup.
	json.NewEncoder(w).Encode(v)
}

// healthz answers 200 "ok" when the database answers a clock read within the
// timeout, and 503 "database unavailable" otherwise (the reason goes to the
// log).
func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if _, err := h.store.Now(ctx); err != nil {
		h.failed(r, "healthz", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(unavailable + "\n"))
		return
	}
	w.Write([]byte("ok\n"))
}

// nonce returns a fresh value for the page's Content-Security-Policy.
func nonce() string {
	var b [18]byte
	rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}
