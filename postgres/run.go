package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/fencekit/fence/internal/driver"
)

// RunStart records a running run for a valid token and abandons the running
// runs of older generations of the same lease, in one statement.
func (d *Driver) RunStart(ctx context.Context, p driver.StartRunParams) (int64, bool, error) {
	var id int64
	err := d.c.queryRow(ctx, d.q.runStart, p.Token.Name, p.Token.Owner, p.Token.Fence, nullIfEmpty(p.Detail)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return id, true, nil
}

// RunFinish is the fenced completion: it changes the run only while the token
// is valid, reading the lease row under a share lock. An empty Result keeps
// the detail recorded at start.
func (d *Driver) RunFinish(ctx context.Context, p driver.FinishRunParams) (bool, error) {
	var exit any
	if p.ExitCode != nil {
		exit = *p.ExitCode
	}
	n, err := d.c.exec(ctx, d.q.runFinish,
		p.Token.Name, p.Token.Owner, p.Token.Fence, p.ID, p.Status,
		nullIfEmpty(p.Result), nullIfEmpty(p.Error), exit)
	return n == 1, err
}

// RunMarkLost marks a still-running run of generation fence lost.
func (d *Driver) RunMarkLost(ctx context.Context, id, fence int64, reason string) (bool, error) {
	n, err := d.c.exec(ctx, d.q.runMarkLost, id, fence, nullIfEmpty(reason))
	return n == 1, err
}

// RunRefused ends an abandoned run now, once, with its worker's report.
func (d *Driver) RunRefused(ctx context.Context, id, fence int64, report string) (bool, error) {
	n, err := d.c.exec(ctx, d.q.runRefused, id, fence, report)
	return n == 1, err
}

// RunSweep marks lost the running runs whose lease generation is no longer
// valid, and returns how many.
func (d *Driver) RunSweep(ctx context.Context) (int64, error) {
	return d.c.exec(ctx, d.q.runSweep)
}

// RunPrune deletes finished runs of lease ("" for all) older than
// olderThanMs by the database clock.
func (d *Driver) RunPrune(ctx context.Context, lease string, olderThanMs int64) (int64, error) {
	return d.c.exec(ctx, d.q.runPrune, lease, olderThanMs)
}

// RunGet returns one run; ok is false when there is none.
func (d *Driver) RunGet(ctx context.Context, id int64) (driver.Run, bool, error) {
	r, err := scanRun(d.c.queryRow(ctx, d.q.runGet, id))
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Run{}, false, nil
	}
	if err != nil {
		return driver.Run{}, false, err
	}
	return r, true, nil
}

// RunList returns the runs matching f, newest first. Empty fields of f match
// everything; a Limit of 0 or less means no limit.
func (d *Driver) RunList(ctx context.Context, f driver.RunFilter) ([]driver.Run, error) {
	var limit any
	if f.Limit > 0 {
		limit = int64(f.Limit)
	}
	rows, err := d.c.query(ctx, d.q.runList, f.Lease, f.Status, limit, max(f.Before, 0))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func scanRun(row interface{ Scan(...any) error }) (driver.Run, error) {
	var (
		r    driver.Run
		exit sql.NullInt64
	)
	err := row.Scan(&r.ID, &r.Lease, &r.Owner, &r.Holder, &r.Fence, &r.Status, &r.StartedAtMs,
		&r.FinishedAtMs, &r.Result, &r.Error, &exit)
	if exit.Valid {
		r.ExitCode = &exit.Int64
	}
	return r, err
}

// nullIfEmpty stores "" as NULL, so that absent text reads back as absent.
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
