package ops

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fencekit/fence"
)

// Task epochs (package task) on the page: a task's epoch is the fence of
// its lease "task:<id>", and every write of the task (its steps, its
// effect ledger) is fenced by it. The page draws them like runs, a row per
// task and a bar per epoch: who held it, from when to when, what it
// committed, and its stale effects.
//
// What the database keeps, and so what can be shown (an epoch shows while
// it is the task's current one, and once superseded by the rows it wrote:
// an epoch superseded before it wrote anything leaves no trace):
//   - an epoch's start: its fence read as database-clock microseconds
//     (fences are max(previous + 1, the database clock in µs), ADR 0004), or
//     its lease's acquisition time while it is the lease's; else its first
//     write;
//   - its end: the next epoch's start, or the task's finish, or nothing
//     while it runs; a superseded epoch whose writes go on after the next
//     one started (a zombie's claim) ends at its last write, and the
//     overlap is hatched as for a stale run;
//   - who held it: the lease's holder for the current epoch, the holder of
//     the task lease's run at that fence (task.Execute records runs) for
//     older ones; "" when nothing recorded it;
//   - its stale effects: the effect claims it left open (claimed, or in
//     doubt) once superseded — a commit that was refused, or an effect in
//     doubt — and its run's refused completion (a lost or abandoned run at
//     that fence). A write refused before it claimed anything leaves no
//     row, so it cannot be counted here; a claim a newer epoch settled
//     moves to that epoch.

//go:embed queries/task_epochs.sql
var taskEpochsSQL string

// epochTasks is the most tasks whose epochs the page draws.
const epochTasks = 8

// Epoch states besides the task's own (running, succeeded, failed,
// cancelled) for its current epoch.
const epochSuperseded = "superseded"

type epochsView struct {
	DBNow  string      `json:"db_now"`
	Epochs []epochView `json:"epochs"`

	now     time.Time
	version string
}

type epochView struct {
	Task   string `json:"task"`
	Lease  string `json:"lease"`
	Epoch  int64  `json:"epoch"`
	Holder string `json:"holder"`
	// State is the task's state for its current epoch, else "superseded".
	State   string `json:"state"`
	Current bool   `json:"current"`
	From    string `json:"from"`
	// To is "" while the epoch runs.
	To        string `json:"to,omitempty"`
	Committed int64  `json:"committed"`
	// Stale counts the epoch's effect claims left open once it was
	// superseded, and its run's refused completion.
	Stale int64 `json:"stale"`

	from, to time.Time
}

// epochs reads the epochs of the tasks updated last, or of task:<id> when
// lease names a task. lease naming anything else selects none.
func (h *handler) epochs(ctx context.Context, lease string) (epochsView, error) {
	v := epochsView{Epochs: []epochView{}}
	now, err := h.store.Now(ctx)
	if err != nil {
		return v, err
	}
	v.DBNow, v.now = stamp(now), now
	id, isTask := strings.CutPrefix(lease, "task:")
	db := h.store.DB()
	if (lease != "" && !isTask) || db == nil {
		v.version = version(v.Epochs)
		return v, nil
	}
	q := h.store.Rebind(strings.ReplaceAll(taskEpochsSQL, "{{prefix}}", h.store.Prefix()))
	rows, err := db.QueryContext(ctx, q, id, id, epochTasks)
	if err != nil {
		return v, fmt.Errorf("task epochs: %w", err)
	}
	defer rows.Close()
	type raw struct {
		task               string
		epoch, first, last int64
		committed, open    int64
		current            int64
		state              string
		updated            int64
	}
	var rs []raw
	for rows.Next() {
		var r raw
		if err := rows.Scan(&r.task, &r.epoch, &r.first, &r.last, &r.committed, &r.open, &r.current, &r.state, &r.updated); err != nil {
			return v, fmt.Errorf("task epochs: %w", err)
		}
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return v, fmt.Errorf("task epochs: %w", err)
	}
	// Per task: its lease (the current epoch's holder and acquisition) and
	// its runs (older epochs' holders, refused completions).
	type known struct {
		lease fence.LeaseInfo
		runs  []fence.RunInfo
	}
	byTask := map[string]*known{}
	for _, r := range rs {
		if byTask[r.task] != nil {
			continue
		}
		k := &known{}
		l, err := h.store.Get(ctx, "task:"+r.task)
		if err != nil && !errors.Is(err, fence.ErrNotFound) {
			return v, err
		}
		k.lease = l
		if k.runs, err = h.store.Runs(ctx, fence.RunFilter{Lease: "task:" + r.task, Limit: 50}); err != nil {
			return v, err
		}
		byTask[r.task] = k
	}
	for i, r := range rs {
		k := byTask[r.task]
		e := epochView{Task: r.task, Lease: "task:" + r.task, Epoch: r.epoch, Committed: r.committed,
			Current: r.epoch == r.current, State: epochSuperseded}
		first := time.UnixMilli(r.first)
		e.from = epochStart(r.epoch, first)
		if k.lease.Fence == r.epoch && !k.lease.AcquiredAt.IsZero() {
			e.from = k.lease.AcquiredAt
			if k.lease.State == fence.StateHeld {
				e.Holder = holderText(k.lease.Holder, false)
			}
		}
		for _, run := range k.runs {
			if run.Fence != r.epoch {
				continue
			}
			if e.Holder == "" && run.Holder != "" {
				e.Holder = run.Holder
			}
			if run.Status == fence.RunLost || run.Status == fence.RunAbandoned {
				e.Stale++
			}
		}
		if e.Current {
			e.State = r.state
			if r.state != "running" {
				e.to = time.UnixMilli(r.updated)
			}
		} else {
			e.Stale += r.open
			if i+1 < len(rs) && rs[i+1].task == r.task {
				next := rs[i+1]
				e.to = epochStart(next.epoch, time.UnixMilli(next.first))
				if k.lease.Fence == next.epoch && !k.lease.AcquiredAt.IsZero() {
					e.to = k.lease.AcquiredAt
				}
			}
			// A zombie's write after its successor started: its bar goes
			// on to that write, and the overlap shows.
			if last := time.UnixMilli(r.last); e.to.IsZero() || last.After(e.to) {
				e.to = last
			}
		}
		if !e.to.IsZero() && e.to.Before(e.from) {
			e.to = e.from
		}
		e.From = stamp(e.from)
		if !e.to.IsZero() {
			e.To = stamp(e.to)
		}
		v.Epochs = append(v.Epochs, e)
	}
	v.version = version(v.Epochs)
	return v, nil
}

// epochStart is when an epoch began: its fence as database-clock
// microseconds when that is plausible (at most a second after its first
// write and not a week before it; a fence raised by hand or from an older
// scheme is not a time), else its first write.
func epochStart(epoch int64, first time.Time) time.Time {
	t := time.UnixMicro(epoch)
	if t.After(first.Add(time.Second)) || t.Before(first.Add(-7*24*time.Hour)) {
		return first
	}
	return t
}

// epochStatus maps an epoch to the run status whose colour it takes.
func epochStatus(e epochView) fence.RunStatus {
	switch {
	case e.State == "running":
		return fence.RunRunning
	case e.State == "succeeded":
		return fence.RunSucceeded
	case e.State == "failed":
		return fence.RunFailed
	case e.Stale > 0:
		return fence.RunLost
	}
	return fence.RunAbandoned // superseded or cancelled
}

// drawEpochs draws v's epochs as the runs' timeline draws runs.
func drawEpochs(v epochsView, lease string) string {
	runs := make([]fence.RunInfo, 0, len(v.Epochs))
	byID := map[int64]epochView{}
	for i, e := range v.Epochs {
		id := int64(i + 1) // in (task, epoch) order: by start within a task
		byID[id] = e
		r := fence.RunInfo{ID: id, Lease: e.Lease, Holder: e.Holder, Fence: e.Epoch, Status: epochStatus(e), StartedAt: e.from, FinishedAt: e.to}
		runs = append(runs, r)
	}
	rows := epochTasks
	if lease != "" {
		rows = 1
	}
	lk := look{id: "epochline", noun: "Task epochs",
		bar: func(r *tlRun) (string, string, string) {
			e := byID[r.ID]
			who := "holder not recorded"
			if e.Holder != "" {
				who = "held by " + e.Holder
			}
			what := fmt.Sprintf("epoch %d of task %s (%s), %s, %d effect(s) committed", e.Epoch, shown(e.Task), e.State, who, e.Committed)
			if e.Stale > 0 {
				what += fmt.Sprintf(", %d stale effect(s) refused or in doubt", e.Stale)
			}
			return what, "epoch", " epoch"
		},
		overlapText: func(r, succ *tlRun) string {
			return fmt.Sprintf("epoch %d was still writing %s after epoch %d had started: a zombie's effects, refused or in doubt", r.Fence, human(r.end.Sub(succ.StartedAt)), succ.Fence)
		},
	}
	return drawBars(runs, v.now, nil, rows, lk)
}

// apiEpochs is the task epochs the page draws, as JSON (?lease=task:ID for
// one task); ETag as for apiLeases.
func (h *handler) apiEpochs(w http.ResponseWriter, r *http.Request) {
	lease, _, _, _, err := params(r, h.runLimit)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	v, err := h.epochs(ctx, lease)
	if err != nil {
		h.failed(r, "epochs", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": unavailable})
		return
	}
	writeVersioned(w, r, v.version, v.DBNow, v)
}

// apiEpochsTimeline is the task epochs as a standalone SVG image.
func (h *handler) apiEpochsTimeline(w http.ResponseWriter, r *http.Request) {
	lease, _, _, _, err := params(r, h.runLimit)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	v, err := h.epochs(ctx, lease)
	if err != nil {
		h.failed(r, "epochs timeline", err)
		http.Error(w, unavailable, http.StatusServiceUnavailable)
		return
	}
	writeSVG(w, drawEpochs(v, lease))
}
