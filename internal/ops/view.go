package ops

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/fencekit/fence"
)

// The views below are both the JSON of /api/leases and /api/runs and what
// the page's template renders, so the page and its live updates cannot
// disagree. Each carries display text computed here ("expires_in",
// "duration", …) next to the raw values: the script only places text, and
// recomputes the relative ones from the raw values and db_now.

// leasesView is /api/leases: one page of leases by name.
type leasesView struct {
	DBNow  string      `json:"db_now"`
	Leases []leaseView `json:"leases"`
	// Next is the cursor of the next page (?after=NEXT), "" on the last.
	Next string `json:"next"`
	// version names the content apart from the clock (the ETag).
	version string
}

type leaseView struct {
	Name string `json:"name"`
	// NameText is Name as the page shows it (see shown).
	NameText string `json:"name_text"`
	State    string `json:"state"`
	// Holder is the name the lease's owner went by (fence.WithHolder), ""
	// unless it is held now: a released, revoked or expired lease has no
	// holder, whatever its row still says. HolderText is how the page shows
	// it (see holderText).
	Holder string `json:"holder"`
	// Owner and OwnerShort are the first 8 characters of the owner token,
	// for the clients that read them, also only while held. The full owner
	// token is never served: with it and the fence, anyone could renew,
	// release or write as the holder.
	Owner      string `json:"owner"`
	OwnerShort string `json:"owner_short"`
	HolderText string `json:"holder_text"`
	Fence      int64  `json:"fence"`
	ExpiresAt  string `json:"expires_at"` // "" when released or revoked
	// ExpiresInMs is ExpiresAt minus the database's now: negative once
	// expired, null when released or revoked.
	ExpiresInMs *int64 `json:"expires_in_ms"`
	ExpiresIn   string `json:"expires_in"`
	UpdatedAt   string `json:"updated_at"`
}

// runsView is /api/runs: one page of runs, newest first, and the stale
// rejections among the same runs' filter.
type runsView struct {
	DBNow string    `json:"db_now"`
	Runs  []runView `json:"runs"`
	Stale []runView `json:"stale"`
	// Next is the cursor of the next (older) page (?before=NEXT), 0 on the
	// last.
	Next    int64 `json:"next"`
	version string
	now     time.Time
	infos   []fence.RunInfo // Runs as read and settled, for the timeline
}

type runView struct {
	ID int64 `json:"id"`
	// Kind is "term" for a term of leadership that fence.Elect recorded
	// (its holder led from its start to its end), "run" for a job's run.
	Kind      string `json:"kind"`
	Lease     string `json:"lease"`
	LeaseText string `json:"lease_text"` // Lease as the page shows it (see shown)
	Owner     string `json:"owner"`      // the 8-character prefix, as in leaseView

	OwnerShort string `json:"owner_short"`
	Holder     string `json:"holder"` // the holder name of the token that started the run
	HolderText string `json:"holder_text"`
	Fence      int64  `json:"fence"`
	Status     string `json:"status"`
	StartedAt  string `json:"started_at"`
	Started    string `json:"started"` // "12s ago"
	FinishedAt string `json:"finished_at"`
	Finished   string `json:"finished"`
	// DurationMs is finished minus started, or the time so far while running.
	DurationMs int64  `json:"duration_ms"`
	Duration   string `json:"duration"`
	ExitCode   *int   `json:"exit_code"`
	Exit       string `json:"exit"`
	Error      string `json:"error"`
}

// holder is the short form of an owner token that the JSON still serves
// as owner/owner_short. The full token is the holder's secret, and this
// page has readers who are not the holder; its first 8 characters (32 bits)
// tell holders apart and are far too few to act as one. People read the
// holder name (Holder, HolderText) instead.
func holder(owner string) string { return short(owner) }

// leaseQuery selects the leases of a page or an /api/leases request.
type leaseQuery struct {
	lease string // one lease by name; after and limit do not apply
	after string
	limit int
}

// runQuery selects the runs of a page or an /api/runs request.
type runQuery struct {
	lease  string
	before int64
	limit  int
}

func (h *handler) leases(ctx context.Context, q leaseQuery) (leasesView, error) {
	v := leasesView{Leases: []leaseView{}}
	var ls []fence.LeaseInfo
	var now time.Time
	if q.lease != "" {
		l, err := h.store.Get(ctx, q.lease)
		switch {
		case err == nil:
			ls, now = []fence.LeaseInfo{l}, l.DBNow
		case errors.Is(err, fence.ErrNotFound):
			if now, err = h.store.Now(ctx); err != nil {
				return v, err
			}
		default:
			return v, err
		}
	} else {
		var err error
		// One more than the page: whether there is a next page.
		ls, now, err = h.store.ListPage(ctx, fence.LeaseFilter{After: q.after, Limit: q.limit + 1})
		if err != nil {
			return v, err
		}
		if len(ls) > q.limit {
			ls = ls[:q.limit]
			v.Next = ls[len(ls)-1].Name
		}
	}
	v.DBNow = stamp(now)
	for _, l := range ls {
		v.Leases = append(v.Leases, leaseToView(l))
	}
	// The version leaves out the countdowns, which only the clock changes;
	// a lease whose state the clock changes (held to expired) changes it.
	stable := slices.Clone(v.Leases)
	for i := range stable {
		stable[i].ExpiresIn, stable[i].ExpiresInMs = "", nil
	}
	v.version = version(stable, v.Next)
	return v, nil
}

func leaseToView(l fence.LeaseInfo) leaseView {
	v := leaseView{Name: l.Name, NameText: shown(l.Name), State: string(l.State), Fence: l.Fence, ExpiresIn: "–", UpdatedAt: stamp(l.UpdatedAt)}
	if l.State == fence.StateHeld {
		v.Holder, v.HolderText = l.Holder, holderText(l.Holder, true)
		v.Owner, v.OwnerShort = holder(l.Owner), holder(l.Owner)
	}
	if l.ExpiresAt.IsZero() {
		return v
	}
	v.ExpiresAt = stamp(l.ExpiresAt)
	ms := l.ExpiresAt.Sub(l.DBNow).Milliseconds()
	v.ExpiresInMs = &ms
	if l.State == fence.StateHeld {
		v.ExpiresIn = human(l.Remaining)
	} else {
		v.ExpiresIn = human(l.DBNow.Sub(l.ExpiresAt)) + " ago"
	}
	return v
}

func (h *handler) runs(ctx context.Context, q runQuery) (runsView, error) {
	v := runsView{Runs: []runView{}, Stale: []runView{}}
	now, err := h.store.Now(ctx)
	if err != nil {
		return v, err
	}
	v.DBNow, v.now = stamp(now), now
	recent, err := h.store.Runs(ctx, fence.RunFilter{Lease: q.lease, Before: q.before, Limit: q.limit + 1})
	if err != nil {
		return v, err
	}
	if len(recent) > q.limit {
		recent = recent[:q.limit]
		v.Next = recent[len(recent)-1].ID
	}
	recent = SettleRunning(ctx, h.store, recent)
	v.infos = recent
	for _, r := range recent {
		v.Runs = append(v.Runs, runToView(r, now))
	}
	var stale []fence.RunInfo
	for _, st := range []fence.RunStatus{fence.RunLost, fence.RunAbandoned} {
		rs, err := h.store.Runs(ctx, fence.RunFilter{Lease: q.lease, Status: st, Before: q.before, Limit: q.limit})
		if err != nil {
			return v, err
		}
		stale = append(stale, rs...)
	}
	// Runs still marked running whose generation is gone are stale too.
	for _, r := range recent {
		if r.Status == fence.RunLost && r.Error == ExpiredOutcome && !slices.ContainsFunc(stale, func(x fence.RunInfo) bool { return x.ID == r.ID }) {
			stale = append(stale, r)
		}
	}
	slices.SortFunc(stale, func(a, b fence.RunInfo) int { return cmp.Compare(b.ID, a.ID) })
	for _, r := range stale[:min(len(stale), q.limit)] {
		v.Stale = append(v.Stale, runToView(r, now))
	}
	// A running run's "so far" changes with the clock and is not content:
	// the version covers what the ledger says.
	v.version = version(recent, stale[:min(len(stale), q.limit)], v.Next)
	return v, nil
}

func runToView(r fence.RunInfo, now time.Time) runView {
	v := runView{ID: r.ID, Kind: "run", Lease: r.Lease, LeaseText: shown(r.Lease), Holder: r.Holder, HolderText: holderText(r.Holder, true),
		Owner: holder(r.Owner), OwnerShort: holder(r.Owner), Fence: r.Fence,
		Status: string(r.Status), StartedAt: stamp(r.StartedAt), Started: human(now.Sub(r.StartedAt)) + " ago",
		Finished: "–", ExitCode: r.ExitCode, Exit: "–", Error: r.Error}
	if r.FinishedAt.IsZero() {
		d := max(now.Sub(r.StartedAt), 0)
		v.DurationMs, v.Duration = d.Milliseconds(), human(d)+" so far"
	} else {
		v.FinishedAt, v.Finished = stamp(r.FinishedAt), human(now.Sub(r.FinishedAt))+" ago"
		v.DurationMs, v.Duration = r.Duration().Milliseconds(), human(r.Duration())
	}
	if r.ExitCode != nil {
		v.Exit = fmt.Sprint(*r.ExitCode)
	}
	if r.IsTerm() {
		v.Kind = "term"
	}
	return v
}

// version names content for an ETag: a digest of its JSON. Callers leave
// out what only the clock changes (db_now and the "… ago" texts), so that
// an unchanged refresh is a 304 without a body.
func version(parts ...any) string {
	d := sha256.New()
	enc := json.NewEncoder(d)
	for _, p := range parts {
		if err := enc.Encode(p); err != nil {
			panic(fmt.Sprintf("ops: encoding a view: %v", err)) // views are plain data
		}
	}
	return base64.RawURLEncoding.EncodeToString(d.Sum(nil)[:18])
}

// stamp is a database time as RFC 3339 UTC with milliseconds.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// short is the first 8 characters of an owner token, as `fence leases` shows
// it. Nothing the handler serves carries more of a token.
func short(owner string) string {
	if len(owner) > 8 {
		return owner[:8]
	}
	return owner
}

// shown is a lease name as the page shows it: a control or format
// character (C0, C1, bidi overrides and isolates, zero-width characters)
// or a line separator becomes its \u escape, so that a name stored before
// fence refused them (fence.ValidateName) neither reorders the text around
// it nor looks like another name. The raw name stays the key and the link.
func shown(name string) string {
	if !strings.ContainsFunc(name, invisible) {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if invisible(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func invisible(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// holderText is a holder name as the page shows it: the name, "(unnamed)"
// for a row written before fence recorded names (when someone held it),
// or "–" for nobody (a revoked lease).
func holderText(holder string, held bool) string {
	switch {
	case holder != "":
		return holder
	case held:
		return "(unnamed)"
	}
	return "–"
}

// human formats a duration the way the CLI's tables do (the page's script
// has a copy, for live updates).
func human(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%s%dms", sign, d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%s%.1fs", sign, d.Seconds())
	default:
		return sign + d.Round(time.Second).String()
	}
}
