package sqlite

import (
	"context"

	"github.com/fencekit/fence/internal/driver"
)

var _ driver.Stater = (*Driver)(nil)

// Stats reads what a metrics scrape exports, in two statements
// (queries/stats_leases.sql, queries/stats_runs.sql).
func (d *Driver) Stats(ctx context.Context, maxLeases int) (driver.Stats, error) {
	var st driver.Stats
	rows, err := d.db.QueryContext(ctx, d.q["stats_leases"], max(maxLeases, 0))
	if err != nil {
		return st, err
	}
	err = driver.ScanLeaseStats(rows, &st)
	rows.Close()
	if err != nil {
		return st, err
	}
	rows, err = d.db.QueryContext(ctx, d.q["stats_runs"])
	if err != nil {
		return st, err
	}
	defer rows.Close()
	return st, driver.ScanRunCounts(rows, &st)
}
