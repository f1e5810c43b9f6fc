package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/fencekit/fence/internal/driver"
)

// LeaseAcquire takes the lease. The first statement depends on what this
// process last learnt of the row (driver.Hints):
//
//   - known held: a plain autocommit SELECT (lease_get.sql) refuses a valid
//     lease from the read, which takes no lock and writes nothing, so
//     refusals neither queue behind the holder's row lock (a committing
//     writer's X lock, a fenced transaction's S lock) nor behind each other;
//     a lapsed row is then taken as below;
//   - known to exist, not held (released or lapsed): one plain UPDATE
//     (lease_acquire_update.sql) takes it, its fence in the OK packet;
//   - unknown, or that UPDATE matched nothing (taken in between, or no row):
//     the upsert (acquireUpsert), one statement that answers every case.
//
// Each path is correct whatever the row holds; a stale hint costs a round
// trip. So a released or lapsed lease is taken in one UPDATE, a held one is
// refused in one lock-free read from the second attempt on (the first
// refusal of a name this process knows nothing of goes through the upsert
// and its lock), and a new name is inserted by the upsert.
func (d *Driver) LeaseAcquire(ctx context.Context, p driver.AcquireParams) (driver.AcquireResult, error) {
	// Not on Galera: a plain read on one node may not have seen a release
	// committed through another yet (reads are not causal there without
	// wsrep_sync_wait), and a refusal from it is not linearizable — the CI
	// Galera torture caught one (seed 1796400636). The upsert writes, so
	// certification orders it with the other nodes' commits.
	path := pathUpsert
	if d.galera.Load() != galeraYes {
		path = d.hints.Path(p.Name)
	}
	return d.hints.Acquire(ctx, p, path, driver.AcquireSteps{Get: d.LeaseGet, Update: d.acquireUpdate, Full: d.acquireUpsert})
}

// acquireUpdate takes a lapsed or released lease whose row exists with one
// plain UPDATE (lease_acquire_update.sql). done is false when it matched
// nothing (held, or no row).
func (d *Driver) acquireUpdate(ctx context.Context, p driver.AcquireParams) (r driver.AcquireResult, done bool, err error) {
	var res sql.Result
	err = d.run("lease_acquire_update", func(st *sql.Stmt) error {
		return d.retryDeadlock(ctx, func() error {
			var err error
			if st != nil {
				res, err = st.ExecContext(ctx, p.Owner, p.Holder, p.TTLMs, p.Name)
			} else {
				res, err = d.db.ExecContext(ctx, d.q["lease_acquire_update"], p.Owner, p.Holder, p.TTLMs, p.Name)
			}
			return err
		})
	})
	if err != nil {
		return r, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return r, false, afterWrite(err)
	}
	if n == 0 {
		return r, false, nil // held, or no row: nothing was written
	}
	if f, err := res.LastInsertId(); err == nil && f > 0 {
		return driver.AcquireResult{Acquired: true, Fence: f}, true, nil
	}
	// A trigger zeroed the insert id (MariaDB). The row carries this call's
	// owner token unless the new generation already ended, which within a
	// round trip only a revoke or a TTL shorter than that can do; the fence
	// is then unknown, and so is the outcome for the caller.
	l, ok, err := d.LeaseGet(ctx, p.Name)
	if err != nil {
		return r, false, afterWrite(err)
	}
	if !ok || l.Owner != p.Owner {
		return r, false, afterWrite(fmt.Errorf("mysql: acquire of %q committed, but a trigger hid its fence and the row has moved on", p.Name))
	}
	return driver.AcquireResult{Acquired: true, Fence: l.Fence, LeasedUntilMs: l.LeasedUntilMs, NowMs: l.NowMs}, true, nil
}

// acquireUpsert takes the lease in one statement (see lease_acquire.sql),
// whose insert id is the new fence, or 0 when the lease is held. On 0 it
// reads, on the same connection, the session's LAST_INSERT_ID() together
// with the holder: a trigger on the lease table zeroes the insert id that the
// server reports (measured on MariaDB 10.11, with any trigger at all) but
// not the session's value. The holder is read after the acquire, so it may
// have changed since, which makes the answer older, never wrong about this
// call.
//
// On MariaDB 10.5+ the statement ends in RETURNING instead
// (lease_acquire_returning.sql), which answers both outcomes, the holder
// included, in its one round trip. MySQL 8 has no INSERT ... RETURNING.
func (d *Driver) acquireUpsert(ctx context.Context, p driver.AcquireParams) (driver.AcquireResult, error) {
	ret, err := d.hasReturning(ctx)
	if err != nil {
		return driver.AcquireResult{}, err
	}
	if ret {
		return d.acquireReturning(ctx, p)
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return driver.AcquireResult{}, err
	}
	defer conn.Close()
	res, err := d.execOn(ctx, conn, d.q["lease_acquire"], p.Name, p.Owner, p.TTLMs, p.Holder, p.Owner, p.Holder, p.TTLMs)
	if err != nil {
		return driver.AcquireResult{}, err
	}
	fence, err := res.LastInsertId()
	if err != nil {
		return driver.AcquireResult{}, err
	}
	if fence > 0 {
		return driver.AcquireResult{Acquired: true, Fence: fence}, nil
	}
	var (
		l                           driver.Lease
		name, owner, holder, state  sql.NullString
		f, until, acquired, updated sql.NullInt64
	)
	err = conn.QueryRowContext(ctx, d.q["lease_acquire_outcome"], p.Name).Scan(
		&fence, &name, &owner, &holder, &f, &state, &until, &acquired, &updated, &l.NowMs)
	if err != nil {
		// The acquire may have taken the lease and a trigger hidden it.
		return driver.AcquireResult{}, afterWrite(err)
	}
	if fence > 0 {
		return driver.AcquireResult{Acquired: true, Fence: fence}, nil
	}
	r := driver.AcquireResult{NowMs: l.NowMs}
	if name.Valid {
		l.Name, l.Owner, l.Holder, l.Fence, l.State = name.String, owner.String, holder.String, f.Int64, trimState(state.String)
		l.LeasedUntilMs, l.AcquiredAtMs, l.UpdatedAtMs = until.Int64, acquired.Int64, updated.Int64
		r.Holder = &l
	}
	return r, nil
}

func (d *Driver) acquireReturning(ctx context.Context, p driver.AcquireParams) (driver.AcquireResult, error) {
	var (
		id int64
		l  driver.Lease
	)
	err := d.run("lease_acquire_returning", func(st *sql.Stmt) error {
		return d.retryDeadlock(ctx, func() error {
			return d.queryRow(ctx, st, "lease_acquire_returning", p.Name, p.Owner, p.TTLMs, p.Holder, p.Owner, p.Holder, p.TTLMs).Scan(
				&id, &l.Name, &l.Owner, &l.Holder, &l.Fence, &l.State, &l.LeasedUntilMs, &l.AcquiredAtMs, &l.UpdatedAtMs, &l.NowMs)
		})
	})
	l.State = trimState(l.State)
	if err != nil {
		return driver.AcquireResult{}, err
	}
	if id > 0 {
		return driver.AcquireResult{Acquired: true, Fence: id, LeasedUntilMs: l.LeasedUntilMs, NowMs: l.NowMs}, nil
	}
	return driver.AcquireResult{NowMs: l.NowMs, Holder: &l}, nil
}

// queryRow runs st, or query key ad hoc when st is nil.
func (d *Driver) queryRow(ctx context.Context, st *sql.Stmt, key string, args ...any) *sql.Row {
	if st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return d.db.QueryRowContext(ctx, d.q[key], args...)
}

// hasReturning reports whether the server is MariaDB 10.5 or later, asking
// it once.
func (d *Driver) hasReturning(ctx context.Context) (bool, error) {
	switch d.returning.Load() {
	case returningYes:
		return true, nil
	case returningNo:
		return false, nil
	}
	var v string
	if err := d.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return false, err
	}
	ok := mariaDBReturning(v)
	if ok {
		d.returning.Store(returningYes)
	} else {
		d.returning.Store(returningNo)
	}
	return ok, nil
}

// mariaDBReturning reports whether a VERSION() string is MariaDB 10.5+.
func mariaDBReturning(v string) bool {
	if !strings.Contains(v, "MariaDB") {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 10 || (major == 10 && minor >= 5)
}

// LeaseRenew extends a valid lease; the new expiry comes back through
// LAST_INSERT_ID, and the database now is that expiry minus the TTL. It
// runs as a prepared statement on any pooled connection (see stmts.go).
// When a trigger on the table zeroed the insert id (MariaDB), the expiry is
// read back from the row instead: the session's LAST_INSERT_ID() would need
// the same connection, which a pooled prepared statement does not promise.
// If the row no longer carries the token (released or revoked since), the
// renewal still happened and is reported, with its expiry unknown (0).
func (d *Driver) LeaseRenew(ctx context.Context, t driver.TokenParams, ttlMs int64) (driver.RenewResult, error) {
	var res sql.Result
	err := d.run("lease_renew", func(st *sql.Stmt) error {
		return d.retryDeadlock(ctx, func() error {
			var err error
			if st != nil {
				res, err = st.ExecContext(ctx, ttlMs, t.Name, t.Owner, t.Fence)
			} else {
				res, err = d.db.ExecContext(ctx, d.q["lease_renew"], ttlMs, t.Name, t.Owner, t.Fence)
			}
			return err
		})
	})
	if err != nil {
		return driver.RenewResult{}, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return driver.RenewResult{}, err
	}
	until, err := res.LastInsertId()
	if err == nil && until > 0 {
		return driver.RenewResult{Renewed: true, LeasedUntilMs: until, NowMs: until - ttlMs}, nil
	}
	l, ok, err := d.LeaseGet(ctx, t.Name)
	if err != nil {
		return driver.RenewResult{}, afterWrite(err)
	}
	r := driver.RenewResult{Renewed: true, NowMs: l.NowMs}
	if ok && l.Owner == t.Owner && l.Fence == t.Fence && l.LeasedUntilMs > 0 {
		r.LeasedUntilMs, r.NowMs = l.LeasedUntilMs, l.LeasedUntilMs-ttlMs
	}
	return r, nil
}

// batchChunk is how many tokens one UPDATE of LeaseRenewBatch carries, and
// readChunk how many names its SELECT does: three placeholders and one
// each, within the 65,535 a prepared statement may have (when the handle
// does not interpolate parameters).
const (
	batchChunk = 5000
	readChunk  = 20000
)

// LeaseRenewBatch renews the tokens with one UPDATE ... JOIN over a derived
// table of the tokens per batchChunk, then learns the outcome with one
// SELECT of the leases' rows per readChunk names (see
// lease_renew_batch_read.sql): 10,000 tokens take three statements.
func (d *Driver) LeaseRenewBatch(ctx context.Context, ts []driver.TokenParams, ttlMs int64) ([]driver.RenewResult, error) {
	out := make([]driver.RenewResult, len(ts))
	for start := 0; start < len(ts); start += batchChunk {
		chunk := ts[start:min(start+batchChunk, len(ts))]
		args := make([]any, 0, 3*len(chunk)+1)
		for _, t := range chunk {
			args = append(args, t.Name, t.Owner, t.Fence)
		}
		q := strings.Replace(d.q["lease_renew_batch"], "{{tokens}}", tokensTable(len(chunk)), 1)
		if _, err := d.exec(ctx, q, append(args, ttlMs)...); err != nil {
			if start > 0 {
				err = afterWrite(err)
			}
			return nil, err
		}
	}
	names := make([]any, 0, len(ts))
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		if !seen[t.Name] {
			seen[t.Name] = true
			names = append(names, t.Name)
		}
	}
	rows := make(map[string]driver.Lease, len(names))
	for start := 0; start < len(names); start += readChunk {
		chunk := names[start:min(start+readChunk, len(names))]
		q := strings.Replace(d.q["lease_renew_batch_read"], "{{names}}", placeholders(len(chunk)), 1)
		if err := d.readBatch(ctx, q, chunk, rows); err != nil {
			return nil, afterWrite(err)
		}
	}
	for i, t := range ts {
		if l, ok := rows[t.Name]; ok && l.Owner == t.Owner && l.Fence == t.Fence && l.LeasedUntilMs > l.NowMs {
			out[i] = driver.RenewResult{Renewed: true, LeasedUntilMs: l.LeasedUntilMs, NowMs: l.NowMs}
		}
	}
	return out, nil
}

func (d *Driver) readBatch(ctx context.Context, q string, args []any, into map[string]driver.Lease) error {
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var l driver.Lease
		if err := rows.Scan(&l.Name, &l.Owner, &l.Fence, &l.LeasedUntilMs, &l.NowMs); err != nil {
			return err
		}
		into[l.Name] = l
	}
	return rows.Err()
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// tokensTable is a derived table of n (name, owner, fence) rows, all
// placeholders. Every placeholder is cast: a UNION's column type is
// aggregated over all its rows, and an uncast fence would make the join
// compare BIGINT with a string as floating point; binary names keep the
// join on the primary key byte-wise.
func tokensTable(n int) string {
	var b strings.Builder
	b.Grow(n * 70)
	b.WriteString("SELECT CAST(? AS BINARY) AS n, CAST(? AS BINARY) AS o, CAST(? AS SIGNED) AS f")
	for range n - 1 {
		b.WriteString(" UNION ALL SELECT CAST(? AS BINARY), CAST(? AS BINARY), CAST(? AS SIGNED)")
	}
	return b.String()
}

// LeaseRelease releases a valid lease.
func (d *Driver) LeaseRelease(ctx context.Context, t driver.TokenParams) (bool, error) {
	var res sql.Result
	err := d.run("lease_release", func(st *sql.Stmt) error {
		return d.retryDeadlock(ctx, func() error {
			var err error
			if st != nil {
				res, err = st.ExecContext(ctx, t.Name, t.Owner, t.Fence)
			} else {
				res, err = d.db.ExecContext(ctx, d.q["lease_release"], t.Name, t.Owner, t.Fence)
			}
			return err
		})
	})
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if n > 0 {
		d.hints.Free(t.Name)
	}
	return n > 0, err
}

// LeaseIsHeld reports whether the token is valid now.
func (d *Driver) LeaseIsHeld(ctx context.Context, t driver.TokenParams) (bool, error) {
	var n int64
	err := d.run("lease_is_held", func(st *sql.Stmt) error {
		return d.queryRow(ctx, st, "lease_is_held", t.Owner, t.Fence, t.Name).Scan(&n)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil // no row: never held, or pruned
	}
	return n > 0, err
}

// LeaseGet reads one lease row, with a prepared statement (stmts.go): it is
// also the first statement of LeaseAcquire on a lease known to be held.
func (d *Driver) LeaseGet(ctx context.Context, name string) (driver.Lease, bool, error) {
	var l driver.Lease
	err := d.run("lease_get", func(st *sql.Stmt) error {
		var err error
		l, err = scanLease(d.queryRow(ctx, st, "lease_get", name))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Lease{}, false, nil
	}
	return l, err == nil, err
}

// LeaseList reads one page of lease rows, ordered by name byte-wise.
func (d *Driver) LeaseList(ctx context.Context, f driver.LeaseFilter) ([]driver.Lease, int64, error) {
	limit := int64(f.Limit)
	if limit <= 0 {
		limit = math.MaxInt64 // MySQL has no "LIMIT ALL"
	}
	rows, err := d.db.QueryContext(ctx, d.q["lease_list"], f.After, limit)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []driver.Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if len(out) > 0 {
		return out, out[0].NowMs, nil
	}
	n, err := d.Now(ctx)
	return out, n, err
}

// LeaseRevoke bumps the fence and clears the owner; the new fence comes back
// through LAST_INSERT_ID.
func (d *Driver) LeaseRevoke(ctx context.Context, name string) (int64, bool, error) {
	n, f, err := d.execLastID(ctx, d.q["lease_revoke"], name)
	if err != nil || n == 0 {
		return 0, false, err
	}
	d.hints.Free(name)
	return f, true, nil
}

// Now reads the database clock.
func (d *Driver) Now(ctx context.Context) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, d.q["now"]).Scan(&n)
	return n, err
}

// GuardSQL returns the fence predicate with three "?" placeholders (first is
// for numbered dialects). It is an EXISTS over the lease row read with LOCK
// IN SHARE MODE, so it works in UPDATE, DELETE and INSERT ... SELECT: the
// share lock holds off a takeover until the user's transaction ends, and a
// takeover that committed first is seen, under READ COMMITTED as under
// REPEATABLE READ. Its clock is the statement start, so every row of a
// multi-row statement gets the same verdict even if the server evaluates the
// subquery per row.
func (d *Driver) GuardSQL(t driver.TokenParams, first int) (string, []any) {
	return d.q["guard"], []any{t.Name, t.Owner, t.Fence}
}

// LockTx share-locks the lease row in the caller's transaction and reports
// whether the token is valid (see lock_tx.sql). On a Galera node it writes
// the row instead (galera_guard.sql): a share lock there fences nothing
// against the other nodes.
func (d *Driver) LockTx(ctx context.Context, tx *sql.Tx, t driver.TokenParams) (bool, error) {
	g, err := d.FencedWritesNeedTx(ctx)
	if err != nil {
		return false, err
	}
	if g {
		return d.galeraGuard(ctx, tx, t)
	}
	// Prepared (stmts.go) and run on tx's connection: Tx.StmtContext uses
	// the statement already prepared there, or prepares it there once.
	var n int64
	err = d.run("lock_tx", func(st *sql.Stmt) error {
		if st != nil {
			err := tx.StmtContext(ctx, st).QueryRowContext(ctx, t.Name, t.Owner, t.Fence).Scan(&n)
			if !isPrepareLimit(err) {
				return err
			}
			// Not prepared on tx's connection (the server's global limit):
			// nothing ran, and the transaction goes on.
		}
		return tx.QueryRowContext(ctx, d.q["lock_tx"], t.Name, t.Owner, t.Fence).Scan(&n)
	})
	return n > 0, err
}

type scanner interface{ Scan(dest ...any) error }

func scanLease(s scanner) (driver.Lease, error) {
	var l driver.Lease
	err := s.Scan(&l.Name, &l.Owner, &l.Holder, &l.Fence, &l.State, &l.LeasedUntilMs, &l.AcquiredAtMs, &l.UpdatedAtMs, &l.NowMs)
	l.State = trimState(l.State)
	return l, err
}

// trimState undoes PAD_CHAR_TO_FULL_LENGTH: state is a CHAR(8) (schema
// version 4), which a session with that sql_mode reads back padded with
// spaces ("held    "). Without it the server trims, and this is a no-op.
func trimState(s string) string { return strings.TrimRight(s, " ") }

// LeaseRaiseFences moves every fence below floor up to it and revokes those
// leases, in one transaction that locks the rows before it reads them.
func (d *Driver) LeaseRaiseFences(ctx context.Context, floor int64) (used int64, raised []driver.RaisedLease, err error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if floor == 0 {
		if err := tx.QueryRowContext(ctx, d.q["lease_raise_floor"]).Scan(&floor); err != nil {
			return 0, nil, err
		}
	}
	rows, err := tx.QueryContext(ctx, d.q["lease_raise_lock"], floor)
	if err != nil {
		return 0, nil, err
	}
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			rows.Close()
			return 0, nil, err
		}
		raised = append(raised, driver.RaisedLease{Lease: l, NewFence: floor})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	for _, r := range raised {
		res, err := tx.ExecContext(ctx, d.q["lease_raise"], floor, r.Name, floor)
		if err != nil {
			return 0, nil, err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return 0, nil, fmt.Errorf("mysql: raise %q: %d rows changed (%v), want 1", r.Name, n, err)
		}
	}
	if err := commit(ctx, tx); err != nil {
		return 0, nil, afterWrite(err)
	}
	for _, r := range raised {
		d.hints.Free(r.Name)
	}
	return floor, raised, nil
}
