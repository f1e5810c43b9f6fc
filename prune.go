package fence

import (
	"context"
	"fmt"
	"time"
)

// PruneRuns deletes the finished runs (succeeded, failed, lost, abandoned)
// of lease, or of every lease when lease is "", that finished more than
// olderThan ago by the database clock, and returns how many it deleted.
// Running runs are never deleted, however old: a live one is still being
// written, and one whose worker died must stay visible until SweepRuns marks
// it lost.
//
// The ledger grows by one row per run (Schedule("@every 30s") is 2,880 rows a
// job a day); call this from a maintenance job, use `fence runs prune`, or
// give Schedule WithRetention.
func (s *Store) PruneRuns(ctx context.Context, lease string, olderThan time.Duration) (int64, error) {
	if olderThan < time.Millisecond {
		return 0, fmt.Errorf("%w: prune retention %v must be at least 1ms (it is how long finished runs are kept)", ErrInvalid, olderThan)
	}
	if lease != "" {
		if err := ValidateName(lease); err != nil {
			return 0, err
		}
	}
	n, err := s.drv.RunPrune(ctx, lease, olderThan.Milliseconds())
	if err != nil {
		return 0, s.wrapWrite("prune runs", lease, err)
	}
	return n, nil
}

// WithRetention makes Schedule delete this lease's finished runs older than
// d after each slot it ran (PruneRuns), so a frequent schedule does not grow
// the run ledger without bound. Zero (the default) keeps every run.
func WithRetention(d time.Duration) RunOption { return func(c *runConfig) { c.retention = d } }
