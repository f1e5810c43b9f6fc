package ops

import (
	"context"

	"github.com/fencekit/fence"
)

// ExpiredOutcome is the error shown for a run still marked running whose
// lease generation is no longer valid: its worker died or was stopped
// without finishing it, and what it did is not known.
const ExpiredOutcome = "lease expired, outcome unknown"

// SettleRunning shows a run still marked running as lost when its lease is
// no longer held by its generation (expired, released, revoked or taken
// over): "running 12.3s so far" would be false. The ledger itself is left
// as it is; fence run, the next holder's run and SweepRuns mark it.
func SettleRunning(ctx context.Context, s *fence.Store, rs []fence.RunInfo) []fence.RunInfo {
	leases := map[string]*fence.LeaseInfo{}
	for i, r := range rs {
		if r.Status != fence.RunRunning {
			continue
		}
		l, ok := leases[r.Lease]
		if !ok {
			if got, err := s.Get(ctx, r.Lease); err == nil {
				l = &got
			}
			leases[r.Lease] = l
		}
		if l == nil || (l.State == fence.StateHeld && l.Fence == r.Fence) {
			continue
		}
		rs[i].Status = fence.RunLost
		if rs[i].Error == "" {
			rs[i].Error = ExpiredOutcome
		}
	}
	return rs
}
