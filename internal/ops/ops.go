// Package ops is fence's operations page, served by `fence serve`: a small
// read-only web page of the store's leases (holder, fence, time left by the
// database clock), a timeline of its runs per lease (bars by status,
// labelled with their fence, a stale run's overlap with its successor
// marked), its recent runs and its stale rejections (runs marked lost or
// abandoned, with the reason), plus a liveness probe and, when given one, a
// metrics handler.
//
//	GET /             the page: server-rendered HTML and SVG, complete
//	                  without JavaScript; ?lease=NAME shows one lease,
//	                  ?after=NAME the next page of leases, ?before=ID older
//	                  runs. An inline script refreshes it every second from
//	                  the endpoints below, fetching only what changed
//	GET /api/leases   {"db_now", "leases": [...], "next"} as JSON: 50 leases
//	                  by name (?after=NAME, ?limit= up to 500, ?lease=NAME)
//	GET /api/runs     {"db_now", "runs": [...], "stale": [...], "next"}:
//	                  50 runs newest first (?before=ID, ?limit=, ?lease=)
//	GET /api/timeline the timeline of those runs, as an SVG image
//	GET /api/epochs   {"db_now", "epochs": [...]}: the epochs of the 8 tasks
//	                  (package task) updated last, or of ?lease=task:ID:
//	                  holder, from, to, state, effects committed, stale
//	                  effects (epochs.go says what the database can tell)
//	GET /api/epochs/timeline  those epochs drawn like the runs, as SVG
//	GET /healthz      200 "ok" when the database answers, else 503
//	                  "database unavailable"
//	GET /metrics      the handler given to WithMetrics (404 without one)
//
// /api/leases and /api/runs send an ETag that names their content apart
// from the clock; a request with If-None-Match gets 304 and no body while
// nothing changed, whatever the size of the table, and the X-Fence-DB-Now
// header for the countdowns. A page of leases is one primary-key range:
// its cost does not grow with the table.
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
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fence"
)

// Option configures Handler.
type Option func(*handler)

// WithMetrics serves h at /metrics, for example promhttp.Handler() or
// fenceprom's. Without it /metrics is 404.
func WithMetrics(h http.Handler) Option { return func(o *handler) { o.metrics = h } }

// WithRunLimit sets how many recent runs, and how many stale rejections,
// the page shows at once (default 50; at most MaxPage). Older runs are a
// link away (?before=ID).
func WithRunLimit(n int) Option { return func(o *handler) { o.runLimit = n } }

// WithLeaseLimit sets how many leases a page of the page lists (default 50;
// at most MaxPage).
func WithLeaseLimit(n int) Option { return func(o *handler) { o.leaseLimit = n } }

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
	// leaseLimit is the leases of one page.
	leaseLimit int
	refresh    time.Duration
	timeout    time.Duration
	log        *slog.Logger
	mux        *http.ServeMux
}

// Handler returns the operations page and its endpoints for store.
func Handler(store *fence.Store, opts ...Option) http.Handler {
	h := &handler{store: store, runLimit: 50, leaseLimit: 50, refresh: time.Second, timeout: 5 * time.Second,
		log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(h)
	}
	h.runLimit = min(max(h.runLimit, 1), MaxPage)
	h.leaseLimit = min(max(h.leaseLimit, 1), MaxPage)
	h.refresh = max(h.refresh, 100*time.Millisecond)
	if h.timeout <= 0 {
		h.timeout = 5 * time.Second
	}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("GET /api/leases", h.apiLeases)
	h.mux.HandleFunc("GET /api/runs", h.apiRuns)
	h.mux.HandleFunc("GET /api/timeline", h.apiTimeline)
	h.mux.HandleFunc("GET /api/epochs", h.apiEpochs)
	h.mux.HandleFunc("GET /api/epochs/timeline", h.apiEpochsTimeline)
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

// MaxPage is the most leases or runs one request returns (?limit=).
const MaxPage = 500

// badRequest is a query parameter the handler refuses; its text is safe to
// show (it quotes the value escaped).
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

// params reads the paging parameters: lease (a lease name), after (a lease
// name: the leases after it), before (a run ID: the runs below it), limit
// (1..MaxPage, default def).
func params(r *http.Request, def int) (lease, after string, before int64, limit int, err error) {
	q := r.URL.Query()
	for _, k := range []string{"lease", "after", "before", "limit"} {
		if len(q[k]) > 1 {
			return "", "", 0, 0, badRequest{fmt.Sprintf("%s is given %d times; give it once", k, len(q[k]))}
		}
	}
	lease, after = q.Get("lease"), q.Get("after")
	for k, v := range map[string]string{"lease": lease, "after": after} {
		if v != "" && fence.ValidateName(v) != nil {
			return "", "", 0, 0, badRequest{fmt.Sprintf("%s=%s is not a lease name", k, quote(v))}
		}
	}
	if v := q.Get("before"); v != "" {
		if before, err = strconv.ParseInt(v, 10, 64); err != nil || before < 0 {
			return "", "", 0, 0, badRequest{fmt.Sprintf("before=%s is not a run ID (a positive integer; 0 for the newest)", quote(v))}
		}
	}
	limit = def
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > MaxPage {
			return "", "", 0, 0, badRequest{fmt.Sprintf("limit=%s is not between 1 and %d", quote(v), MaxPage)}
		}
	}
	return lease, after, before, limit, nil
}

// quote is a refused parameter for its error message: clipped, quoted in
// ASCII, and without a character that is markup anywhere.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.NewReplacer("<", `\x3c`, ">", `\x3e`, "&", `\x26`).Replace(strconv.QuoteToASCII(s))
}

// apiLeases is one page of leases by name (?after=NAME&limit=N), or one
// lease (?lease=NAME). Its ETag names the content apart from the clock:
// with If-None-Match the answer to an unchanged refresh is a 304 without a
// body, and its X-Fence-DB-Now header carries the database clock for the
// countdowns.
func (h *handler) apiLeases(w http.ResponseWriter, r *http.Request) {
	lease, after, _, limit, err := params(r, h.leaseLimit)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	v, err := h.leases(ctx, leaseQuery{lease: lease, after: after, limit: limit})
	if err != nil {
		h.failed(r, "leases", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": unavailable})
		return
	}
	writeVersioned(w, r, v.version, v.DBNow, v)
}

// apiRuns is one page of runs, newest first (?before=ID&limit=N), of one
// lease with ?lease=NAME; ETag as for apiLeases.
func (h *handler) apiRuns(w http.ResponseWriter, r *http.Request) {
	lease, _, before, limit, err := params(r, h.runLimit)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	v, err := h.runs(ctx, runQuery{lease: lease, before: before, limit: limit})
	if err != nil {
		h.failed(r, "runs", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": unavailable})
		return
	}
	writeVersioned(w, r, v.version, v.DBNow, v)
}

// apiTimeline is the timeline of the runs apiRuns would return, as a
// standalone SVG image: the page's script swaps it in when runs change.
func (h *handler) apiTimeline(w http.ResponseWriter, r *http.Request) {
	lease, _, before, limit, err := params(r, h.runLimit)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	svg, err := h.timeline(ctx, runQuery{lease: lease, before: before, limit: limit})
	if err != nil {
		h.failed(r, "timeline", err)
		http.Error(w, unavailable, http.StatusServiceUnavailable)
		return
	}
	writeSVG(w, svg)
}

func writeSVG(w http.ResponseWriter, svg string) {
	hd := w.Header()
	hd.Set("Content-Type", "image/svg+xml; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Write([]byte(svg))
}

// writeVersioned answers 304 when the request's If-None-Match names
// version, else the JSON of v.
func writeVersioned(w http.ResponseWriter, r *http.Request, version, dbNow string, v any) {
	etag := `"` + version + `"`
	hd := w.Header()
	hd.Set("ETag", etag)
	hd.Set("X-Fence-DB-Now", dbNow)
	for _, m := range strings.Split(r.Header.Get("If-None-Match"), ",") {
		if m = strings.TrimSpace(m); m == etag || m == "W/"+etag {
			hd.Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusNotModified)
			return
		}
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
