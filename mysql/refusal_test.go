package mysql

import (
	"errors"
	"io"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencekit/fence/internal/driver"
)

// A refused acquire of a lease the driver knows to be held takes no row
// lock: it answers while another transaction holds the lease row's X lock
// (a writer about to commit) or its S lock (the holder's fenced
// transaction). The acquiring session's lock wait timeout is 1 s, so an
// acquire that queued for the lock would fail with error 1205 instead. The
// control, the upsert path (hints.Force -1, what every refusal was before),
// does queue, which shows the test can see the difference.
func TestRefusalTakesNoLock(t *testing.T) {
	for _, iso := range isolations {
		for _, lock := range []string{"FOR UPDATE", "LOCK IN SHARE MODE"} {
			t.Run(iso+"/"+lock, func(t *testing.T) {
				t.Parallel()
				d := newDriver(t, viaOpen)
				db := sessionPool(t, iso)
				ctx := ctxT(t)
				if _, err := db.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
					t.Fatal(err)
				}
				w, err := New(db, d.prefix)
				if err != nil {
					t.Fatal(err)
				}
				a := mustAcquire(t, w, "job", "A", 60_000) // w now knows "job" is held
				tx, err := d.db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				var n int
				if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+d.prefix+"leases WHERE lease_name = 'job' "+lock).Scan(&n); err != nil || n != 1 {
					t.Fatalf("lock the row: %d %v", n, err)
				}
				r, err := w.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: "B", TTLMs: 60_000})
				if err != nil || r.Acquired || r.Holder == nil || r.Holder.Owner != "A" || r.Holder.Fence != a.Fence ||
					r.Holder.LeasedUntilMs <= r.Holder.NowMs {
					t.Fatalf("refusal under %s: %+v holder %+v, %v", lock, r, r.Holder, err)
				}
				w.hints.Force = -1
				_, err = w.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: "C", TTLMs: 60_000})
				var me *gomysql.MySQLError
				// The upsert X-locks the duplicate row it updates, held or not.
				if !errors.As(err, &me) || me.Number != erLockWaitTimeout {
					t.Errorf("control: the upsert under %s answered %v, want a lock wait timeout", lock, err)
				}
			})
		}
	}
}

// An error of a call that had sent only reads is definite (nothing was
// written) and keeps its retryability.
func TestBeforeWriteIsDefinite(t *testing.T) {
	d := &Driver{}
	err := driver.BeforeWrite(io.ErrUnexpectedEOF)
	if !d.IsServerError(err) || !d.IsRetryable(err) {
		t.Fatalf("beforeWrite(EOF): server error %v, retryable %v; want both", d.IsServerError(err), d.IsRetryable(err))
	}
	if d.IsServerError(io.ErrUnexpectedEOF) {
		t.Fatal("a bare EOF must stay ambiguous")
	}
}
