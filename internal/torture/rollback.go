package torture

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencekit/fence"
)

// The rollback fault: the lease table goes back in time, as after a restore
// of an older dump or the promotion of an asynchronous replica that missed
// the last commits. While the clients run, the harness copies the lease
// table's rows into t_snap (one INSERT … SELECT, a consistent copy); at a
// later barrier it puts them back (DELETE, then INSERT … SELECT from the
// copy, in one transaction), and the clients go on with the tokens they
// hold. Only the lease table goes back: the protected rows, the event log
// and the external resources keep what they saw, which is the point. A
// restore of a whole database would roll the protected rows back too, and
// take the writes that proved a later generation with them; what cannot be
// rolled back is what the outside world was told (see extResource).
//
// The restore happens at a barrier, with every client quiesced: a switch to
// a restored database or a promoted replica breaks every connection in
// flight to the old one, so no statement straddles it. See
// docs/RELIABILITY.md ("Rollback") for what is checked across it and why.

// rollbackCols are the lease table's columns, in the order both tables use.
const rollbackCols = "lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, renew_count"

// rollbackPlan is the fault's schedule: whether a snapshot is taken in the
// next window, when, and whether a barrier restores the one it has.
type rollbackPlan struct {
	rng *rand.Rand
	mu  sync.Mutex
	// taken: a snapshot is in t_snap and not yet restored; atMs is the
	// database time it was taken at.
	taken bool
	atMs  int64
	// waited counts the barriers the snapshot has waited at.
	waited int
}

// nextSnapshot decides the next window's snapshot: ok is false when one
// is already waiting for its restore. Every other window takes one, so a
// run of a few windows has rollbacks whatever the seed. Half the snapshots are taken in the window's last 150 ms, so that the
// restore (at the barrier right after) often brings back a generation still
// valid by the database clock, whose holder's token then works again; the
// rest anywhere in the window, whose generations have mostly lapsed by then.
func (r *rollbackPlan) nextSnapshot(window time.Duration) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taken {
		return 0, false
	}
	if r.rng.IntN(2) == 0 {
		late := min(150*time.Millisecond, window/2)
		return window - time.Duration(r.rng.Int64N(int64(late))), true
	}
	return time.Duration(r.rng.Int64N(int64(window))), true
}

// restoreDue reports whether this barrier restores the snapshot (most soon
// after it was taken, some windows later: an older dump; never more than
// three, so every run of four windows or more has a rollback), and if so
// whether the restore shifts the held leases' expiry forward (shift) and
// the database time the snapshot was taken at.
//
// The shift stands in for a TTL long against the switchover. In
// production a 30 s lease restored from a replica a second behind is still
// valid when the replica is promoted, and its holder's token works again;
// here the TTL is 150 ms and quiescing the clients for the barrier alone
// takes about that long, so without the shift almost every restored
// generation has lapsed before anyone can use it. Half the restores move
// each held row's leased_until_ms forward by the time since the snapshot:
// the restored leases have as long left as they had when copied.
func (r *rollbackPlan) restoreDue() (due, shift bool, atMs int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.taken {
		return false, false, 0
	}
	r.waited++
	if r.rng.IntN(10) >= 6 && r.waited < 3 {
		return false, false, 0
	}
	return true, r.rng.IntN(2) == 0, r.atMs
}

func (r *rollbackPlan) setTaken(v bool, atMs int64) {
	r.mu.Lock()
	r.taken, r.atMs, r.waited = v, atMs, 0
	r.mu.Unlock()
}

// snapshotAfter copies the lease table after d, unless the window stops
// first. It holds the restart lock so that it never runs against a server
// that is down.
func (h *harness) snapshotAfter(d time.Duration, stop chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
		return
	}
	h.restartMu.Lock()
	defer h.restartMu.Unlock()
	var atMs int64
	err := retry(context.Background(), func(ctx context.Context) error {
		now, err := h.admin.Now(ctx)
		if err != nil {
			return err
		}
		atMs = now.UnixMilli()
		return h.sc.snapshot(ctx, h.admin.DB())
	})
	if err != nil {
		h.stats.error(fmt.Errorf("torture: rollback fault: snapshot of the lease table: %w", err))
		return
	}
	h.stats.fault("snapshot")
	h.rollback.setTaken(true, atMs)
}

// snapshot replaces t_snap's rows with the lease table's.
func (s schema) snapshot(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range []string{"DELETE FROM " + s.snap, "INSERT INTO " + s.snap + " (" + rollbackCols + ") SELECT " + rollbackCols + " FROM " + s.leases} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// restore puts the snapshot back: the lease table's rows become t_snap's
// (a lease with no row then has none), each held row's leased_until_ms
// moved forward by shiftMs (see restoreDue). On PostgreSQL it marks the
// transaction so the old-rule control's triggers leave the restored fences
// alone.
func (s schema) restore(ctx context.Context, db *sql.DB, shiftMs int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if s.d == fence.Postgres {
		if _, err := tx.ExecContext(ctx, "SELECT set_config('fence_torture.restoring', 'on', true)"); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+s.leases); err != nil {
		return err
	}
	cols := "lease_name, owner_token, fence_token, state, CASE WHEN state = 'held' THEN leased_until_ms + ? ELSE leased_until_ms END, acquired_at_ms, updated_at_ms, renew_count"
	if _, err := tx.ExecContext(ctx, s.q("INSERT INTO "+s.leases+" ("+rollbackCols+") SELECT "+cols+" FROM "+s.snap), shiftMs); err != nil {
		return err
	}
	return tx.Commit()
}

// leaseRow is one lease row as stored.
type leaseRow struct {
	found bool
	owner string
	fence int64
	state string
	until int64
}

func (s schema) readLease(ctx context.Context, db *sql.DB, name string) (leaseRow, error) {
	var r leaseRow
	err := db.QueryRowContext(ctx, s.q("SELECT owner_token, fence_token, state, leased_until_ms FROM "+s.leases+" WHERE lease_name = ?"), name).
		Scan(&r.owner, &r.fence, &r.state, &r.until)
	if errors.Is(err, sql.ErrNoRows) {
		return leaseRow{}, nil
	}
	r.found = err == nil
	return r, err
}

func (s schema) clockSeq(ctx context.Context, db *sql.DB, name string) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, s.q("SELECT n FROM "+s.clock+" WHERE lease_name = ?"), name).Scan(&n)
	return n, err
}

// oldRuleDDL is the control's (Config.OldFenceRule, PostgreSQL only): BEFORE
// triggers that make every new generation's fence the previous one plus
// one, and a new row's 1, whatever fence's own statement computed: the rule
// fence had before the floor from the database clock. RETURNING reports the
// row as the BEFORE trigger left it, so the clients are handed the fences
// the table stores. The restore (restoring = on) is left alone.
func (s schema) oldRuleDDL() []string {
	guard := `coalesce(current_setting('fence_torture.restoring', true), '') <> 'on'`
	return []string{
		`CREATE FUNCTION ` + s.p + `t_old_rule_upd() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.fence_token <> OLD.fence_token AND ` + guard + ` THEN
		NEW.fence_token := OLD.fence_token + 1;
	END IF;
	RETURN NEW;
END $$`,
		`CREATE FUNCTION ` + s.p + `t_old_rule_ins() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF ` + guard + ` THEN
		NEW.fence_token := 1;
	END IF;
	RETURN NEW;
END $$`,
		`CREATE TRIGGER ` + s.p + `t_old_rule_upd BEFORE UPDATE ON ` + s.leases + ` FOR EACH ROW EXECUTE FUNCTION ` + s.p + `t_old_rule_upd()`,
		`CREATE TRIGGER ` + s.p + `t_old_rule_ins BEFORE INSERT ON ` + s.leases + ` FOR EACH ROW EXECUTE FUNCTION ` + s.p + `t_old_rule_ins()`,
	}
}

// doRollback restores the snapshot at barrier w, with every client
// quiesced, and returns each lease's model state for the next window. The
// restore's own INSERTs fire the lease table's log trigger; those events are
// the restore, not acquisitions, so each lease's log is read past them, and
// its facts restart from the restored row: the database's own history goes
// on from there. held are the tokens the clients hold, to tell which
// restored generations have a holder again.
func (h *harness) doRollback(ctx context.Context, w int, next []state, held map[fence.Token]bool, shift bool, snapMs int64) error {
	err := retry(ctx, func(ctx context.Context) error {
		var shiftMs int64
		if shift {
			now, err := h.admin.Now(ctx)
			if err != nil {
				return err
			}
			shiftMs = max(0, now.UnixMilli()-snapMs)
		}
		return h.sc.restore(ctx, h.admin.DB(), shiftMs)
	})
	if err != nil {
		return fmt.Errorf("torture: barrier %d: rollback fault: restoring the lease table: %w", w, err)
	}
	h.rollback.setTaken(false, 0)
	h.stats.fault(FaultRollback)
	if shift {
		h.stats.fault("rollback-shifted")
	}
	for li, name := range h.leases {
		var row leaseRow
		var seq int64
		var info fence.LeaseInfo
		var found bool
		err := retry(ctx, func(ctx context.Context) error {
			var err error
			if row, err = h.sc.readLease(ctx, h.admin.DB(), name); err != nil {
				return err
			}
			if seq, err = h.sc.clockSeq(ctx, h.admin.DB(), name); err != nil {
				return err
			}
			info, err = h.admin.Get(ctx, name)
			found = err == nil
			if errors.Is(err, fence.ErrNotFound) {
				err = nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("torture: barrier %d: rollback fault: reading lease %s: %w", w, name, err)
		}
		f := h.direct[li]
		f.seq = seq
		// As the log's own events leave them: a released row keeps its
		// owner with leased_until 0, a revoked one has none.
		f.fence, f.owner, f.until = row.fence, row.owner, row.until
		n := next[li]
		n.Fence, n.Unknown, n.Valid = 0, false, false
		n.Orphan = false
		if found {
			tok := fence.Token{Lease: name, Owner: info.Owner, Fence: info.Fence}
			n.Fence, n.Valid = info.Fence, info.State == fence.StateHeld
			n.Orphan = !held[tok]
			if n.Valid {
				h.stats.fault("rollback-valid")
				if !n.Orphan {
					h.stats.fault("rollback-revived")
				}
			}
		}
		next[li] = n
	}
	return nil
}
