package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/fencekit/fence/internal/driver"
	"github.com/jackc/pgx/v5/pgconn"
)

// LeaseAcquire takes the lease if it is absent, released or expired. Which
// statement goes first depends on what this process last learnt of the row
// (driver.Hints):
//
//   - known held: a plain read (lease_get.sql) refuses a valid lease, with
//     its holder, in one round trip that locks nothing and writes nothing;
//     a lapsed row is then taken as below;
//   - known to exist and not held (released, lapsed, or ours before): one
//     plain UPDATE (lease_acquire_update.sql) takes it;
//   - unknown, or that UPDATE matched nothing: lease_acquire.sql, one
//     statement that takes the lease or reports the holder from its
//     snapshot, and for a name with no row the upsert of
//     lease_acquire_new.sql.
//
// Each path is correct whatever the row holds; a stale hint costs a round
// trip. When the lease is refused because a valid holder is seen, Holder is
// that row; when the snapshot showed the lease free but a concurrent
// acquisition won, Holder is nil, because the winner is not visible to the
// statement.
func (d *Driver) LeaseAcquire(ctx context.Context, p driver.AcquireParams) (driver.AcquireResult, error) {
	return d.hints.Acquire(ctx, p, d.hints.Path(p.Name), driver.AcquireSteps{Get: d.LeaseGet, Update: d.acquireUpdate, Full: d.acquireFull})
}

// acquireUpdate takes a lapsed or released lease whose row exists with one
// plain UPDATE. done is false when it matched nothing (held, or no row):
// nothing was written.
func (d *Driver) acquireUpdate(ctx context.Context, p driver.AcquireParams) (r driver.AcquireResult, done bool, err error) {
	var fence, until, now int64
	err = d.c.queryRow(ctx, d.q.acquireUpdate, p.Name, p.Owner, p.TTLMs, p.Holder).Scan(&fence, &until, &now)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	return driver.AcquireResult{Acquired: true, Fence: fence, LeasedUntilMs: until, NowMs: now}, true, nil
}

// acquireFull runs lease_acquire.sql, and lease_acquire_new.sql for a name
// with no row.
func (d *Driver) acquireFull(ctx context.Context, p driver.AcquireParams) (driver.AcquireResult, error) {
	r, found, err := d.acquireWith(ctx, d.q.acquire, p)
	if err != nil || r.Acquired || found {
		return r, err
	}
	r, _, err = d.acquireWith(ctx, d.q.acquireNew, p)
	return r, err
}

// acquireWith runs one of the acquire statements; found is false when the
// statement saw no row for the name.
func (d *Driver) acquireWith(ctx context.Context, q string, p driver.AcquireParams) (r driver.AcquireResult, found bool, err error) {
	var (
		acquired              bool
		fence, until          sql.NullInt64
		now                   int64
		owner, state, holder  sql.NullString
		acquiredAt, updatedAt sql.NullInt64
	)
	err = d.c.queryRow(ctx, q, p.Name, p.Owner, p.TTLMs, p.Holder).
		Scan(&acquired, &fence, &until, &now, &owner, &state, &acquiredAt, &updatedAt, &holder)
	if err != nil {
		return driver.AcquireResult{}, false, err
	}
	if acquired {
		return driver.AcquireResult{Acquired: true, Fence: fence.Int64, LeasedUntilMs: until.Int64, NowMs: now}, true, nil
	}
	r = driver.AcquireResult{NowMs: now}
	if fence.Valid && until.Int64 > now {
		r.Holder = &driver.Lease{
			Name:          p.Name,
			Owner:         owner.String,
			Holder:        holder.String,
			Fence:         fence.Int64,
			State:         state.String,
			LeasedUntilMs: until.Int64,
			AcquiredAtMs:  acquiredAt.Int64,
			UpdatedAtMs:   updatedAt.Int64,
			NowMs:         now,
		}
	}
	return r, fence.Valid, nil
}

// LeaseRenew extends a valid lease to ttlMs from the database's now, in one
// plain UPDATE (queries/lease_renew.sql); only a renew that waited for the
// row and cannot tell whether the lease outlived the wait runs again, locking
// the row before reading the clock (queries/lease_renew_locked.sql).
func (d *Driver) LeaseRenew(ctx context.Context, t driver.TokenParams, ttlMs int64) (driver.RenewResult, error) {
	var until, now int64
	err := d.c.queryRow(ctx, d.q.renew, t.Name, t.Owner, t.Fence, ttlMs).Scan(&until, &now)
	switch {
	case err == nil:
		return driver.RenewResult{Renewed: true, LeasedUntilMs: until, NowMs: now}, nil
	case errors.Is(err, sql.ErrNoRows): // pgx.ErrNoRows is sql.ErrNoRows too
		return driver.RenewResult{}, nil
	case !waitedPastExpiry(err) && !missingLeaseUntil(err):
		return driver.RenewResult{}, err
	}
	var lockedUntil sql.NullInt64
	if err := d.c.queryRow(ctx, d.q.renewLocked, t.Name, t.Owner, t.Fence, ttlMs).Scan(&lockedUntil, &now); err != nil {
		return driver.RenewResult{}, err
	}
	return driver.RenewResult{Renewed: lockedUntil.Valid, LeasedUntilMs: lockedUntil.Int64, NowMs: now}, nil
}

// waitedPastExpiry reports the error by which lease_renew.sql and
// lease_release.sql roll themselves back after a lock wait they cannot judge.
func waitedPastExpiry(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, "fence: waited past expiry")
}

// missingLeaseUntil reports that lease_renew.sql or lease_release.sql was
// refused because the schema predates version 4 (no <prefix>lease_until):
// PostgreSQL resolves the function when it parses the statement, so the
// statement did nothing. Until Migrate runs, renew and release take their
// locked forms, which do not call it (correct, one round trip slower), so
// that processes of this version do not lose their leases on a schema that
// another tool has not migrated yet.
func missingLeaseUntil(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42883" && strings.Contains(pgErr.Message, "lease_until")
}

// LeaseRenewBatch renews every token in one statement, passing the tokens as
// three arrays; the result is in input order.
func (d *Driver) LeaseRenewBatch(ctx context.Context, ts []driver.TokenParams, ttlMs int64) ([]driver.RenewResult, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	names := make([]string, len(ts))
	owners := make([]string, len(ts))
	fences := make([]int64, len(ts))
	for i, t := range ts {
		names[i], owners[i], fences[i] = t.Name, t.Owner, t.Fence
	}
	rows, err := d.c.query(ctx, d.q.renewBatch, names, owners, fences, ttlMs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]driver.RenewResult, 0, len(ts))
	for rows.Next() {
		var (
			until sql.NullInt64
			now   int64
		)
		if err := rows.Scan(&until, &now); err != nil {
			return nil, err
		}
		out = append(out, driver.RenewResult{Renewed: until.Valid, LeasedUntilMs: until.Int64, NowMs: now})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != len(ts) {
		return nil, errors.New("postgres: batch renew returned a different number of rows than tokens")
	}
	return out, nil
}

// LeaseRelease gives a valid lease up; false when the token does not hold
// it. One plain UPDATE (queries/lease_release.sql), with the fallback of
// LeaseRenew (queries/lease_release_locked.sql).
func (d *Driver) LeaseRelease(ctx context.Context, t driver.TokenParams) (bool, error) {
	d.hints.Free(t.Name)
	n, err := d.c.exec(ctx, d.q.release, t.Name, t.Owner, t.Fence)
	if err != nil && (waitedPastExpiry(err) || missingLeaseUntil(err)) {
		n, err = d.c.exec(ctx, d.q.releaseLocked, t.Name, t.Owner, t.Fence)
	}
	return n == 1, err
}

// LeaseIsHeld reports whether the token is valid by the database clock.
func (d *Driver) LeaseIsHeld(ctx context.Context, t driver.TokenParams) (bool, error) {
	var ok bool
	err := d.c.queryRow(ctx, d.q.isHeld, t.Name, t.Owner, t.Fence).Scan(&ok)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return ok, err
}

// LeaseGet returns one lease row; ok is false when there is none.
func (d *Driver) LeaseGet(ctx context.Context, name string) (driver.Lease, bool, error) {
	var l driver.Lease
	err := d.c.queryRow(ctx, d.q.get, name).
		Scan(&l.Name, &l.Owner, &l.Holder, &l.Fence, &l.State, &l.LeasedUntilMs, &l.AcquiredAtMs, &l.UpdatedAtMs, &l.NowMs)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Lease{}, false, nil
	}
	if err != nil {
		return driver.Lease{}, false, err
	}
	return l, true, nil
}

// LeaseList returns the leases f selects ordered by name (byte-wise), and
// the instant they were all judged against.
func (d *Driver) LeaseList(ctx context.Context, f driver.LeaseFilter) ([]driver.Lease, int64, error) {
	var limit any
	if f.Limit > 0 {
		limit = int64(f.Limit)
	}
	rows, err := d.c.query(ctx, d.q.list, f.After, limit)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var (
		out []driver.Lease
		now int64
	)
	for rows.Next() {
		var (
			name, owner, holder, state          sql.NullString
			fence, until, acquiredAt, updatedAt sql.NullInt64
		)
		if err := rows.Scan(&now, &name, &owner, &holder, &fence, &state, &until, &acquiredAt, &updatedAt); err != nil {
			return nil, 0, err
		}
		if !name.Valid { // the one row of an empty table
			continue
		}
		out = append(out, driver.Lease{
			Name:          name.String,
			Owner:         owner.String,
			Holder:        holder.String,
			Fence:         fence.Int64,
			State:         state.String,
			LeasedUntilMs: until.Int64,
			AcquiredAtMs:  acquiredAt.Int64,
			UpdatedAtMs:   updatedAt.Int64,
			NowMs:         now,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	return out, now, nil
}

// LeaseRevoke bumps the fence and clears the owner; ok is false when there is
// no such lease.
func (d *Driver) LeaseRevoke(ctx context.Context, name string) (int64, bool, error) {
	d.hints.Free(name)
	var fence int64
	err := d.c.queryRow(ctx, d.q.revoke, name).Scan(&fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return fence, true, nil
}

// LeaseRaiseFences moves every fence below floor up to it and revokes those
// leases, in one statement (queries/lease_raise.sql).
func (d *Driver) LeaseRaiseFences(ctx context.Context, floor int64) (int64, []driver.RaisedLease, error) {
	rows, err := d.c.query(ctx, d.q.raise, floor)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var (
		used int64
		out  []driver.RaisedLease
	)
	for rows.Next() {
		var (
			now                                     int64
			name, owner, holder, state              sql.NullString
			fence, until, acquiredAt, updatedAt, to sql.NullInt64
		)
		if err := rows.Scan(&used, &now, &name, &owner, &holder, &fence, &state, &until, &acquiredAt, &updatedAt, &to); err != nil {
			return 0, nil, err
		}
		if !name.Valid { // nothing was below the floor
			continue
		}
		out = append(out, driver.RaisedLease{
			Lease: driver.Lease{
				Name: name.String, Owner: owner.String, Holder: holder.String, Fence: fence.Int64, State: state.String,
				LeasedUntilMs: until.Int64, AcquiredAtMs: acquiredAt.Int64, UpdatedAtMs: updatedAt.Int64, NowMs: now,
			},
			NewFence: to.Int64,
		})
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	return used, out, nil
}
