package ops

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fencekit/fence"
)

//go:embed page.html
var pageHTML string

// pageTmpl is html/template, so every value is escaped for where it lands
// (text, attribute, class, URL); the script inserts values as text only.
// The timeline is the one piece of markup built elsewhere (timeline.go,
// which escapes every value it writes).
var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{"groups": digitGroups, "shown": shown}).Parse(pageHTML))

// timelineRows is the most leases the overview's timeline draws; a lease's
// own view draws one.
const timelineRows = 8

// digitGroups splits a fence into groups of three digits from the right.
// Fences start at the database clock in microseconds (16 digits); the page
// shows each group in its own span, spaced by CSS rather than by a
// character, so that the number reads as 1 796 343 098 170 000 and still
// copies as 1796343098170000. The script does the same for live updates.
func digitGroups(n int64) []string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []string
	for len(s) > 3 {
		out = append([]string{s[len(s)-3:]}, out...)
		s = s[:len(s)-3]
	}
	out = append([]string{s}, out...)
	if neg {
		out[0] = "-" + out[0]
	}
	return out
}

type pageData struct {
	Nonce           string
	Dialect, Prefix string
	RefreshMs       int64
	// Lease is the lease of a per-lease view, "" on the overview.
	Lease    string
	Leases   leasesView
	Runs     runsView
	Timeline template.HTML
	// The task epochs (epochs.go): on the overview and a task lease's view.
	ShowEpochs     bool
	Epochs         epochsView
	EpochsTimeline template.HTML
	// The endpoints the script refreshes from, for what this page shows.
	LeasesURL, RunsURL, TimelineURL, EpochsURL string
	// Paging links, "" when there is nowhere to go.
	NextLeases, FirstLeases, OlderRuns, NewestRuns string
	Err                                            string
}

// link is "?"+the query of v, or "?" when v is empty (the overview).
func link(v url.Values) string { return "?" + v.Encode() }

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	lease, after, before, _, err := params(r, h.runLimit)
	if err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	d := pageData{Nonce: nonce(), Dialect: string(h.store.Dialect()), Prefix: h.store.Prefix(),
		RefreshMs: h.refresh.Milliseconds(), Lease: lease}
	var lerr, rerr, terr error
	d.Leases, lerr = h.leases(ctx, leaseQuery{lease: lease, after: after, limit: h.leaseLimit})
	rq := runQuery{lease: lease, before: before, limit: h.runLimit}
	d.Runs, rerr = h.runs(ctx, rq)
	if rerr == nil {
		var svg string
		svg, terr = h.drawTimeline(ctx, d.Runs, lease)
		// timeline escapes every value it writes. Inline SVG needs no
		// namespace declaration, and the page names no other origin.
		d.Timeline = template.HTML(strings.Replace(svg, ` xmlns="http://www.w3.org/2000/svg"`, "", 1))
	}
	// Task epochs show on a task lease's view, and on the overview once
	// there are any: a store without tasks gets no empty section.
	var eerr error
	if taskView := strings.HasPrefix(lease, "task:"); lease == "" || taskView {
		d.Epochs, eerr = h.epochs(ctx, lease)
		if eerr == nil && (taskView || len(d.Epochs.Epochs) > 0) {
			d.ShowEpochs = true
			d.EpochsTimeline = template.HTML(strings.Replace(drawEpochs(d.Epochs, lease), ` xmlns="http://www.w3.org/2000/svg"`, "", 1))
		}
	}
	status := http.StatusOK
	if err := errors.Join(lerr, rerr, terr, eerr); err != nil {
		h.failed(r, "page", err)
		d.Err = "The database did not answer (" + unavailable + "); the server's log has the detail."
		status = http.StatusServiceUnavailable
	}

	// The endpoints and links keep what the page shows: its lease, its
	// page of leases, its page of runs.
	lv, rv := url.Values{}, url.Values{}
	if lease != "" {
		lv.Set("lease", lease)
		rv.Set("lease", lease)
	} else {
		if after != "" {
			lv.Set("after", after)
		}
		lv.Set("limit", strconv.Itoa(h.leaseLimit))
	}
	if before > 0 {
		rv.Set("before", strconv.FormatInt(before, 10))
	}
	rv.Set("limit", strconv.Itoa(h.runLimit))
	d.LeasesURL, d.RunsURL, d.TimelineURL = "api/leases"+link(lv), "api/runs"+link(rv), "api/timeline"+link(rv)
	if d.ShowEpochs {
		ev := url.Values{}
		if lease != "" {
			ev.Set("lease", lease)
		}
		d.EpochsURL = "api/epochs" + link(ev)
	}

	here := func(edit func(url.Values)) string {
		v := url.Values{}
		for k, x := range map[string]string{"lease": lease, "after": after} {
			if x != "" {
				v.Set(k, x)
			}
		}
		if before > 0 {
			v.Set("before", strconv.FormatInt(before, 10))
		}
		edit(v)
		return link(v)
	}
	if d.Leases.Next != "" {
		d.NextLeases = here(func(v url.Values) { v.Set("after", d.Leases.Next) })
	}
	if after != "" {
		d.FirstLeases = here(func(v url.Values) { v.Del("after") })
	}
	if d.Runs.Next != 0 {
		d.OlderRuns = here(func(v url.Values) { v.Set("before", strconv.FormatInt(d.Runs.Next, 10)) })
	}
	if before > 0 {
		d.NewestRuns = here(func(v url.Values) { v.Del("before") })
	}

	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, d); err != nil {
		h.failed(r, "page template", err)
		http.Error(w, "ops: rendering the page failed", http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+d.Nonce+"'; style-src 'nonce-"+d.Nonce+
		"'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// timeline renders the timeline of the runs q selects.
func (h *handler) timeline(ctx context.Context, q runQuery) (string, error) {
	v, err := h.runs(ctx, q)
	if err != nil {
		return "", err
	}
	return h.drawTimeline(ctx, v, q.lease)
}

// drawTimeline draws v's runs, reading the current state of their leases
// (at most timelineRows of them) for the revoke marks.
func (h *handler) drawTimeline(ctx context.Context, v runsView, lease string) (string, error) {
	leases := map[string]fence.LeaseInfo{}
	for _, r := range v.infos {
		if _, ok := leases[r.Lease]; ok || len(leases) >= timelineRows {
			continue
		}
		l, err := h.store.Get(ctx, r.Lease)
		if err != nil && !errors.Is(err, fence.ErrNotFound) {
			return "", err
		}
		leases[r.Lease] = l
	}
	rows := timelineRows
	if lease != "" {
		rows = 1
	}
	return timeline(v.infos, v.now, leases, rows), nil
}
