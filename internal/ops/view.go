package ops

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fencekit/fence"
)

// The views below are both the JSON of /api/leases and /api/runs and what
// the page's template renders, so the page and its live updates cannot
// disagree. Each carries display text computed here ("expires_in",
// "duration", …) next to the raw values: the script only places text.

// leasesView is /api/leases.
type leasesView struct {
	DBNow  string      `json:"db_now"`
	Leases []leaseView `json:"leases"`
}

type leaseView struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Owner is only the first 8 characters of the owner token, the same
	// as OwnerShort: the full token and the fence are the holder's secret
	// (with both, anyone could renew, release or write as the holder), and
	// this page has readers who are not the holder. The field stays for
	// the clients that read it.
	Owner      string `json:"owner"`
	OwnerShort string `json:"owner_short"`
	// Holder is the name of the last acquisition's owner (fence.WithHolder),
	// "" after a revoke or when none was recorded; HolderText is how the
	// page shows it (see holderText).
	Holder     string `json:"holder"`
	HolderText string `json:"holder_text"`
	Fence      int64  `json:"fence"`
	ExpiresAt  string `json:"expires_at"` // "" when released or revoked
	// ExpiresInMs is ExpiresAt minus the database's now: negative once
	// expired, null when released or revoked.
	ExpiresInMs *int64 `json:"expires_in_ms"`
	ExpiresIn   string `json:"expires_in"`
}

// runsView is /api/runs: recent runs, and the stale rejections among the
// recent lost and abandoned ones.
type runsView struct {
	DBNow string    `json:"db_now"`
	Runs  []runView `json:"runs"`
	Stale []runView `json:"stale"`
}

type runView struct {
	ID    int64  `json:"id"`
	Lease string `json:"lease"`
	Owner string `json:"owner"` // the 8-character prefix, as in leaseView

	OwnerShort string `json:"owner_short"`
	Holder     string `json:"holder"` // as in leaseView, when the run started
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

func (h *handler) leases(ctx context.Context) (leasesView, error) {
	ls, err := h.store.List(ctx)
	if err != nil {
		return leasesView{Leases: []leaseView{}}, err
	}
	v := leasesView{Leases: make([]leaseView, len(ls))}
	for i, l := range ls {
		v.Leases[i] = leaseToView(l)
		v.DBNow = stamp(l.DBNow)
	}
	if len(ls) == 0 {
		now, err := h.store.Now(ctx)
		if err != nil {
			return v, err
		}
		v.DBNow = stamp(now)
	}
	return v, nil
}

func leaseToView(l fence.LeaseInfo) leaseView {
	v := leaseView{Name: l.Name, State: string(l.State), Owner: short(l.Owner), OwnerShort: short(l.Owner),
		Holder: l.Holder, HolderText: holderText(l.Holder, l.State != fence.StateRevoked),
		Fence: l.Fence, ExpiresIn: "–"}
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

func (h *handler) runs(ctx context.Context) (runsView, error) {
	v := runsView{Runs: []runView{}, Stale: []runView{}}
	now, err := h.store.Now(ctx)
	if err != nil {
		return v, err
	}
	v.DBNow = stamp(now)
	recent, err := h.store.Runs(ctx, fence.RunFilter{Limit: h.runLimit})
	if err != nil {
		return v, err
	}
	recent = SettleRunning(ctx, h.store, recent)
	for _, r := range recent {
		v.Runs = append(v.Runs, runToView(r, now))
	}
	var stale []fence.RunInfo
	for _, st := range []fence.RunStatus{fence.RunLost, fence.RunAbandoned} {
		rs, err := h.store.Runs(ctx, fence.RunFilter{Status: st, Limit: h.runLimit})
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
	for _, r := range stale[:min(len(stale), h.runLimit)] {
		v.Stale = append(v.Stale, runToView(r, now))
	}
	return v, nil
}

func runToView(r fence.RunInfo, now time.Time) runView {
	v := runView{ID: r.ID, Lease: r.Lease, Owner: short(r.Owner), OwnerShort: short(r.Owner),
		Holder: r.Holder, HolderText: holderText(r.Holder, true), Fence: r.Fence,
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
	return v
}

// stamp is a database time as RFC 3339 UTC with milliseconds.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// short is the first 8 characters of an owner token, as `fence leases` shows
// it: 32 bits, enough to tell holders apart on the page, far too few to act
// as one. Nothing the handler serves carries more of a token.
func short(owner string) string {
	if len(owner) > 8 {
		return owner[:8]
	}
	return owner
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

// human formats a duration the way the CLI's tables do.
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
