package ops

import (
	"bytes"
	_ "embed"
	"errors"
	"html/template"
	"net/http"
	"strconv"
	"strings"
)

//go:embed page.html
var pageHTML string

// pageTmpl is html/template, so every value is escaped for where it lands
// (text, attribute, class); the script inserts values as text only.
var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{"groups": digitGroups}).Parse(pageHTML))

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
	Leases          leasesView
	Runs            runsView
	Err             string
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	d := pageData{Nonce: nonce(), Dialect: string(h.store.Dialect()), Prefix: h.store.Prefix(),
		RefreshMs: h.refresh.Milliseconds()}
	var lerr, rerr error
	d.Leases, lerr = h.leases(ctx)
	d.Runs, rerr = h.runs(ctx)
	status := http.StatusOK
	if err := errors.Join(lerr, rerr); err != nil {
		h.failed(r, "page", err)
		d.Err = "The database did not answer (" + unavailable + "); the server's log has the detail."
		status = http.StatusServiceUnavailable
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
