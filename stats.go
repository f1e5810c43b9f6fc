package fence

import (
	"context"
	"fmt"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// Stats is a summary of a store's leases and run ledger, read by the
// database in two statements, for metrics (package fenceprom's
// StoreCollector, fence serve's /metrics).
type Stats struct {
	// DBNow is the database clock when the leases were read.
	DBNow time.Time
	// LeaseCount is the number of lease rows, of which Leases holds the
	// first by name (at most the maxLeases given to Store.Stats).
	LeaseCount int
	Leases     []LeaseStats
	// Runs counts the runs in the ledger by status. Store.PruneRuns deletes
	// finished runs, so these counts can go down.
	Runs map[RunStatus]int64
	// Lost counts lost and abandoned runs by reason (see LossReasons).
	Lost map[string]int64
}

// LossReasons are the reasons of Stats.Lost, derived from the text the
// ledger keeps of each loss (the ledger stores no reason code):
//
//	abandoned   status abandoned: a newer fence started a run of the lease
//	            while this one was still running
//	swept       marked lost by SweepRuns: its lease generation had ended
//	rejected    its fenced completion was refused as stale (FinishRun)
//	unproven    its runner stopped it at the renew deadline (ErrUnproven)
//	superseded, revoked, expired, released, missing
//	            its runner stopped it after a refused renewal, for that reason
//	other       marked lost with a reason of the caller's own (MarkRunLost)
var LossReasons = []string{"abandoned", "swept", "rejected", "unproven", "superseded", "revoked", "expired", "released", "missing", "other"}

// LeaseStats is one lease of Stats.
type LeaseStats struct {
	Name  string
	State State
	Fence int64
	// Holder names the holder of a held lease ("" otherwise): the name it
	// acquired with (WithHolder, default host:pid), or for a row acquired
	// before fence recorded names the first 8 characters of its owner
	// token. Never the whole token.
	Holder string
	// ExpiresAt is when the lease lapses or lapsed by the database clock;
	// zero when released or revoked.
	ExpiresAt time.Time
	// LastSuccess is when the lease's last succeeded run finished, by the
	// database clock; zero if the ledger has none.
	LastSuccess time.Time
}

// Stats reads a summary of the store: the first maxLeases leases by name
// (at most 0 reads none, but still counts them), and the run ledger's
// counts by status and loss reason. The database aggregates; the read is
// two statements whatever the ledger's size.
func (s *Store) Stats(ctx context.Context, maxLeases int) (Stats, error) {
	d, ok := s.drv.(driver.Stater)
	if !ok {
		return Stats{}, fmt.Errorf("%w: the %s driver cannot read stats", ErrInvalid, s.dialect)
	}
	ds, err := d.Stats(ctx, maxLeases)
	if err != nil {
		return Stats{}, s.wrap("stats", "", err)
	}
	st := Stats{DBNow: time.UnixMilli(ds.NowMs), LeaseCount: int(ds.LeaseCount),
		Leases: make([]LeaseStats, len(ds.Leases)), Runs: map[RunStatus]int64{}, Lost: map[string]int64{}}
	for i, l := range ds.Leases {
		li := info(driver.Lease{Name: l.Name, Fence: l.Fence, State: l.State, LeasedUntilMs: l.LeasedUntilMs, NowMs: ds.NowMs})
		ls := LeaseStats{Name: l.Name, State: li.State, Fence: l.Fence, ExpiresAt: li.ExpiresAt}
		if li.State == StateHeld {
			ls.Holder = holderName(l)
		}
		if l.LastSuccessMs > 0 {
			ls.LastSuccess = time.UnixMilli(l.LastSuccessMs)
		}
		st.Leases[i] = ls
	}
	for _, c := range ds.Runs {
		if c.Reason == "" {
			st.Runs[RunStatus(c.Status)] += c.Count
		} else {
			st.Lost[c.Reason] += c.Count
		}
	}
	return st, nil
}

// holderName is the holder identity Stats reports for a held lease: its
// holder name, or for a row acquired before fence recorded names the first
// 8 characters of its owner token (never more: the token is a secret).
func holderName(l driver.LeaseStat) string { return l.Holder }
