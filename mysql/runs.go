package mysql

import (
	"context"
	"database/sql"
	"errors"
	"math"

	"github.com/fencekit/fence/internal/driver"
)

// RunStart records a run for a valid token and abandons older running runs
// of the lease, in one transaction of two statements: the guarded INSERT ...
// SELECT, which locks the lease row until commit (holding off a takeover and
// any other start of the lease, see run_start.sql), and the UPDATE of the
// older runs.
//
// Should InnoDB still pick it as a deadlock victim (against a fenced
// completion that holds a run row and waits for the lease row), the whole
// transaction was rolled back, so it is run again.
func (d *Driver) RunStart(ctx context.Context, p driver.StartRunParams) (id int64, ok bool, err error) {
	err = d.retryDeadlock(ctx, func() error {
		id, ok, err = d.runStart(ctx, p)
		return err
	})
	return id, ok, err
}

func (d *Driver) runStart(ctx context.Context, p driver.StartRunParams) (int64, bool, error) {
	g, err := d.FencedWritesNeedTx(ctx)
	if err != nil {
		return 0, false, err
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	committed := false
	defer rollbackUnless(tx, &committed)
	t := p.Token
	if g {
		if ok, err := d.galeraGuard(ctx, tx, t); err != nil || !ok {
			return 0, false, err
		}
	}
	res, err := tx.ExecContext(ctx, d.q["run_start"], t.Name, t.Owner, t.Fence, p.Detail, t.Name, t.Owner, t.Fence, t.Name, t.Owner, t.Fence)
	if err != nil {
		return 0, false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return 0, false, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, false, err
	}
	if _, err := tx.ExecContext(ctx, d.q["run_abandon"], t.Fence, t.Name, t.Fence); err != nil {
		return 0, false, err
	}
	if err := commit(ctx, tx); err != nil {
		return 0, false, err
	}
	committed = true
	return id, true, nil
}

// RunFinish is the fenced completion (run_finish.sql). On a Galera node it
// is a transaction that writes the lease row first (galera.go), run again
// when certification or InnoDB rolled it back as a deadlock victim.
func (d *Driver) RunFinish(ctx context.Context, p driver.FinishRunParams) (bool, error) {
	t := p.Token
	args := []any{t.Name, p.Status, p.Result, p.Error, p.ExitCode, p.ID, t.Fence, t.Owner, t.Fence}
	g, err := d.FencedWritesNeedTx(ctx)
	if err != nil || !g {
		if err != nil {
			return false, err
		}
		return d.execOne(ctx, d.q["run_finish"], args...)
	}
	var ok bool
	err = d.retryDeadlock(ctx, func() error {
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		committed := false
		defer rollbackUnless(tx, &committed)
		if ok, err = d.galeraGuard(ctx, tx, t); err != nil || !ok {
			return err
		}
		res, err := tx.ExecContext(ctx, d.q["run_finish"], args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if ok = n > 0; !ok {
			return nil // the rollback undoes the guard's bump
		}
		if err := commit(ctx, tx); err != nil {
			ok = false
			return err
		}
		committed = true
		return nil
	})
	return ok, err
}

// RunMarkLost marks a still-running run lost.
func (d *Driver) RunMarkLost(ctx context.Context, id, fence int64, reason string) (bool, error) {
	return d.execOne(ctx, d.q["run_mark_lost"], reason, id, fence)
}

// RunRefused ends an abandoned run now, once, with its worker's report.
func (d *Driver) RunRefused(ctx context.Context, id, fence int64, report string) (bool, error) {
	return d.execOne(ctx, d.q["run_refused"], report, id, fence)
}

// RunPrune deletes finished runs older than the retention.
func (d *Driver) RunPrune(ctx context.Context, lease string, olderThanMs int64) (int64, error) {
	res, err := d.exec(ctx, d.q["run_prune"], olderThanMs, lease, lease)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// RunSweep marks running runs of invalid generations lost.
func (d *Driver) RunSweep(ctx context.Context) (int64, error) {
	if g, err := d.FencedWritesNeedTx(ctx); err != nil {
		return 0, err
	} else if g {
		return d.runSweepGalera(ctx)
	}
	res, err := d.exec(ctx, d.q["run_sweep"])
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// runSweepGalera is RunSweep on a Galera node: one transaction that writes
// the lease rows it judges dead, then marks their runs lost, both at one
// database time (run_sweep_galera*.sql), run again when certification or
// InnoDB rolled it back.
func (d *Driver) runSweepGalera(ctx context.Context) (int64, error) {
	var n int64
	err := d.retryDeadlock(ctx, func() error {
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		committed := false
		defer rollbackUnless(tx, &committed)
		var now int64
		if err := tx.QueryRowContext(ctx, d.q["now"]).Scan(&now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, d.q["run_sweep_galera_bump"], now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, d.q["run_sweep_galera"], now, now)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if err := commit(ctx, tx); err != nil {
			return err
		}
		committed = true
		return nil
	})
	return n, err
}

// RunGet reads one run.
func (d *Driver) RunGet(ctx context.Context, id int64) (driver.Run, bool, error) {
	r, err := scanRun(d.db.QueryRowContext(ctx, d.q["run_get"], id))
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Run{}, false, nil
	}
	return r, err == nil, err
}

// RunList lists runs newest first.
func (d *Driver) RunList(ctx context.Context, f driver.RunFilter) ([]driver.Run, error) {
	limit := int64(f.Limit)
	if limit <= 0 {
		limit = math.MaxInt64 // MySQL has no "LIMIT ALL"
	}
	rows, err := d.db.QueryContext(ctx, d.q["run_list"], f.Lease, f.Lease, f.Status, f.Status, max(f.Before, 0), max(f.Before, 0), limit)
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

func scanRun(s scanner) (driver.Run, error) {
	var r driver.Run
	var exit sql.NullInt64
	err := s.Scan(&r.ID, &r.Lease, &r.Owner, &r.Holder, &r.Fence, &r.Status, &r.StartedAtMs, &r.FinishedAtMs, &r.Result, &r.Error, &exit)
	if exit.Valid {
		r.ExitCode = &exit.Int64
	}
	return r, err
}
