package postgres

import (
	"context"
	"fmt"

	"github.com/fencekit/fence/internal/driver"
)

var _ driver.Stater = (*Driver)(nil)

// statsQuery renders queries/name.sql for this driver's prefix. The stats
// statements are read at scrape time, every few seconds at most, so they
// are rendered on use rather than kept in statements.
func (d *Driver) statsQuery(name string) (string, error) {
	b, err := sqlFiles.ReadFile("queries/" + name + ".sql")
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	q, err := expand(stripComments(string(b)), d.prefix, d.q.nowMs)
	if err != nil {
		return "", fmt.Errorf("postgres: queries/%s.sql: %w", name, err)
	}
	return q, nil
}

// Stats reads what a metrics scrape exports, in two statements
// (queries/stats_leases.sql, queries/stats_runs.sql).
func (d *Driver) Stats(ctx context.Context, maxLeases int) (driver.Stats, error) {
	var st driver.Stats
	ql, err := d.statsQuery("stats_leases")
	if err != nil {
		return st, err
	}
	qr, err := d.statsQuery("stats_runs")
	if err != nil {
		return st, err
	}
	rows, err := d.c.query(ctx, ql, int64(max(maxLeases, 0)))
	if err != nil {
		return st, err
	}
	err = driver.ScanLeaseStats(rows, &st)
	rows.Close()
	if err != nil {
		return st, err
	}
	if rows, err = d.c.query(ctx, qr); err != nil {
		return st, err
	}
	defer rows.Close()
	return st, driver.ScanRunCounts(rows, &st)
}
