package mysql

import (
	"context"

	"github.com/fencekit/fence/internal/driver"
)

var _ driver.Stater = (*Driver)(nil)

// Stats reads what a metrics scrape exports, in two statements
// (queries/stats_leases.sql, queries/stats_runs.sql).
func (d *Driver) Stats(ctx context.Context, maxLeases int) (driver.Stats, error) {
	st, err := driver.ReadStats(ctx, d.db, d.q["stats_leases"], d.q["stats_runs"], maxLeases)
	for i := range st.Leases {
		st.Leases[i].State = trimState(st.Leases[i].State)
	}
	return st, err
}
