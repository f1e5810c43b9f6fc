package sqlite

import (
	"context"

	"github.com/fencekit/fence/internal/driver"
)

var _ driver.Stater = (*Driver)(nil)

// Stats reads what a metrics scrape exports, in two statements
// (queries/stats_leases.sql, queries/stats_runs.sql).
func (d *Driver) Stats(ctx context.Context, maxLeases int) (driver.Stats, error) {
	return driver.ReadStats(ctx, d.db, d.q["stats_leases"], d.q["stats_runs"], maxLeases)
}
