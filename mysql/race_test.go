package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// sessionPool returns a pool of exactly one connection whose session runs at
// isolation iso, so that autocommit statements and the driver's own
// statements on it run at that level.
func sessionPool(t testing.TB, iso string) *sql.DB {
	t.Helper()
	db := openDB(t, viaOpen)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	ctx := ctxT(t)
	if _, err := db.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL "+iso); err != nil {
		t.Fatal(err)
	}
	var got string
	// MariaDB before 11.1 knows only tx_isolation, MySQL 8 only transaction_isolation.
	if err := db.QueryRowContext(ctx, "SELECT @@session.tx_isolation").Scan(&got); err != nil {
		if err := db.QueryRowContext(ctx, "SELECT @@session.transaction_isolation").Scan(&got); err != nil {
			t.Fatal(err)
		}
	}
	if want := map[string]string{"REPEATABLE READ": "REPEATABLE-READ", "READ COMMITTED": "READ-COMMITTED"}[iso]; got != want {
		t.Fatalf("session isolation %q, want %q", got, want)
	}
	return db
}

// staleWrite is one way for the stale owner A to complete: it runs on the
// session pool w and returns the number of rows it changed.
type staleWrite struct {
	name string
	// hold makes another transaction hold the row the write needs; release
	// ends it.
	hold func(ctx context.Context, tx *sql.Tx, d *Driver, table string, runID int64) error
	run  func(ctx context.Context, w *Driver, table string, a driver.TokenParams, runID int64) (int64, error)
	// failsOpen marks the control: a form known to let the stale write land
	// after the takeover under READ COMMITTED.
	failsOpen bool
}

func holdRow1(ctx context.Context, tx *sql.Tx, d *Driver, table string, _ int64) error {
	_, err := tx.ExecContext(ctx, "UPDATE "+table+" SET note = 'other' WHERE id = 1")
	return err
}

func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func guardedUser(sqlFor func(table, guard string) string, argsFor func(g []any) []any, plain bool) func(ctx context.Context, w *Driver, table string, a driver.TokenParams, _ int64) (int64, error) {
	return func(ctx context.Context, w *Driver, table string, a driver.TokenParams, _ int64) (int64, error) {
		g, args := w.GuardSQL(a, 1)
		if plain {
			g = plainGuard(w)
		}
		return affected(w.db.ExecContext(ctx, sqlFor(table, g), argsFor(args)...))
	}
}

// guardedPrepared is guardedUser through the driver's PreparedExecer, as
// Store.Exec runs it: the statement prepared, the values bound.
func guardedPrepared(sqlFor func(table, guard string) string, argsFor func(g []any) []any, plain bool) func(ctx context.Context, w *Driver, table string, a driver.TokenParams, _ int64) (int64, error) {
	return func(ctx context.Context, w *Driver, table string, a driver.TokenParams, _ int64) (int64, error) {
		g, args := w.GuardSQL(a, 1)
		if plain {
			g = plainGuard(w)
		}
		q := sqlFor(table, g)
		if st, err := w.fencedStmt(ctx, q); err != nil || st == nil {
			return 0, fmt.Errorf("not prepared: %v", err)
		}
		return affected(w.PreparedExecer().ExecContext(ctx, q, argsFor(args)...))
	}
}

var staleWrites = []staleWrite{
	{name: "prepared-guarded-update", hold: holdRow1, run: guardedPrepared(fencedWrites[0].sql, fencedWrites[0].args, false)},
	{name: "prepared-guarded-delete", hold: holdRow1, run: guardedPrepared(fencedWrites[1].sql, fencedWrites[1].args, false)},
	{name: "prepared-guarded-insert-select",
		hold: func(ctx context.Context, tx *sql.Tx, d *Driver, table string, _ int64) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, v) VALUES (100, 'other')")
			return err
		},
		run: guardedPrepared(fencedWrites[2].sql, fencedWrites[2].args, false)},
	{name: "control-prepared-plain-exists-update", hold: holdRow1, run: guardedPrepared(fencedWrites[0].sql, fencedWrites[0].args, true), failsOpen: true},
	{name: "guarded-update", hold: holdRow1, run: guardedUser(fencedWrites[0].sql, fencedWrites[0].args, false)},
	{name: "guarded-delete", hold: holdRow1, run: guardedUser(fencedWrites[1].sql, fencedWrites[1].args, false)},
	{name: "guarded-insert-select",
		// An uncommitted insert of the same key makes the guarded insert wait
		// on the duplicate check.
		hold: func(ctx context.Context, tx *sql.Tx, d *Driver, table string, _ int64) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, v) VALUES (100, 'other')")
			return err
		},
		run: guardedUser(fencedWrites[2].sql, fencedWrites[2].args, false)},
	{name: "run-finish",
		hold: func(ctx context.Context, tx *sql.Tx, d *Driver, _ string, runID int64) error {
			_, err := tx.ExecContext(ctx, "UPDATE "+d.prefix+"runs SET error_text = 'other' WHERE run_id = ?", runID)
			return err
		},
		run: func(ctx context.Context, w *Driver, _ string, a driver.TokenParams, runID int64) (int64, error) {
			ok, err := w.RunFinish(ctx, driver.FinishRunParams{ID: runID, Token: a, Status: driver.RunSucceeded, Result: `{"by":"stale A"}`})
			if ok {
				return 1, err
			}
			return 0, err
		}},
	{name: "control-plain-exists-update", hold: holdRow1, run: guardedUser(fencedWrites[0].sql, fencedWrites[0].args, true), failsOpen: true},
}

// The stale owner's fenced write is blocked on its target row while a
// takeover of the lease commits: it must not land after the takeover. It may
// land before (the takeover waited for it, while A still held the lease), or
// change nothing. This is /work/shared/repro/pg-fence-fails-open.sh in
// MySQL terms, under REPEATABLE READ and READ COMMITTED. The plain EXISTS
// without LOCK IN SHARE MODE is the control: under READ COMMITTED it reads
// a snapshot and fails open, which shows the test can see the failure.
func TestStaleWriteBlockedOnTargetDoesNotLandAfterTakeover(t *testing.T) {
	for _, iso := range isolations {
		for _, sw := range staleWrites {
			t.Run(iso+"/"+sw.name, func(t *testing.T) {
				t.Parallel()
				d := newDriver(t, viaOpen)
				w, err := New(sessionPool(t, iso), d.prefix)
				if err != nil {
					t.Fatal(err)
				}
				ctx := ctxT(t)
				table := workTable(t, d)
				a := mustAcquire(t, d, "job", "A", 60_000)
				runID, ok, err := d.RunStart(ctx, driver.StartRunParams{Token: a})
				if err != nil || !ok {
					t.Fatalf("run start: %v %v", ok, err)
				}

				other, err := d.db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Rollback()
				if err := sw.hold(ctx, other, d, table, runID); err != nil {
					t.Fatal(err)
				}

				var (
					mu     sync.Mutex
					events []string
				)
				record := func(e string) {
					mu.Lock()
					events = append(events, e)
					mu.Unlock()
				}
				type outcome struct {
					n   int64
					err error
				}
				var wconn int64
				if err := w.db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&wconn); err != nil {
					t.Fatal(err)
				}
				staleDone := make(chan outcome, 1)
				go func() {
					n, err := sw.run(ctx, w, table, a, runID)
					record("stale write returned " + strconv.FormatInt(n, 10))
					staleDone <- outcome{n, err}
				}()
				// The stale write must be under way (blocked on the held row)
				// before the takeover starts.
				waitConn(t, d.db, wconn)
				takeoverDone := make(chan error, 1)
				go func() {
					err := takeover(ctx, d.db, d, "job", 20)
					record("takeover committed")
					takeoverDone <- err
				}()
				// Give the takeover time to commit, or to be seen waiting.
				var takeoverErr error
				tookOver := false
				for i := 0; i < 2000 && !tookOver && !running(t, d.db, "owner_token = 'B'", d.prefix+"leases"); i++ {
					select {
					case takeoverErr = <-takeoverDone:
						tookOver = true
					case <-time.After(10 * time.Millisecond):
					}
				}
				time.Sleep(200 * time.Millisecond)
				record("other transaction ends")
				if strings.HasSuffix(sw.name, "guarded-insert-select") {
					err = other.Rollback()
				} else {
					err = other.Commit()
				}
				if err != nil {
					t.Fatal(err)
				}
				st := <-staleDone
				if !tookOver {
					takeoverErr = <-takeoverDone
				}
				if takeoverErr != nil {
					t.Fatalf("takeover: %v", takeoverErr)
				}
				if st.err != nil {
					t.Fatalf("stale write: %v (events %v)", st.err, events)
				}
				mu.Lock()
				defer mu.Unlock()
				t.Logf("%s %s: %v", iso, sw.name, events)
				// The takeover touches only the lease row, so if it returned
				// after the other transaction ended it had waited for the stale
				// write's share lock, and the write committed first. A takeover
				// that returned before was not held off: the write must then
				// have changed nothing. (Both goroutines report after the
				// server answered, so their own order says nothing.)
				failedOpen := st.n > 0 && slices.Index(events, "takeover committed") < slices.Index(events, "other transaction ends")
				switch {
				case sw.failsOpen && iso == "READ COMMITTED" && d.isMariaDB(t):
					if !failedOpen {
						t.Errorf("control: expected the plain EXISTS to fail open under READ COMMITTED on MariaDB, events %v", events)
					}
				case sw.failsOpen:
				case failedOpen:
					t.Errorf("FAILS OPEN: the stale write landed after the takeover committed (events %v)", events)
				}
			})
		}
	}
}

// waitConn waits until connection id is running a statement.
func waitConn(t testing.TB, db *sql.DB, id int64) {
	t.Helper()
	ctx := ctxT(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND COMMAND IN ('Query', 'Execute')", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			time.Sleep(100 * time.Millisecond)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection %d never ran its statement", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweepRounds is how many rounds TestSweepWaitsForRenewalInFlight runs per
// isolation level: 3 by default, FENCE_SWEEP_ROUNDS to run more by hand.
func sweepRounds(t *testing.T) int {
	if v := os.Getenv("FENCE_SWEEP_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FENCE_SWEEP_ROUNDS=%q: want a positive integer", v)
		}
		return n
	}
	return 3
}

// A renewal that the server evaluated while the lease was valid, but whose
// commit is not yet visible, keeps the generation valid: the sweep must not
// mark its run lost from a row version older than the renewal. The renewal's
// statement (lease_renew.sql) runs in a transaction that commits only after
// the lease's old expiry has passed and the sweep, on a session at the given
// isolation level, has started; that is a renewal whose commit was delayed
// (a slow fsync, a stalled network) at the worst moment. Under READ
// COMMITTED the old sweep read the lease rows as a snapshot, judged the run
// lost, and the holder's completion was then refused while IsHeld was true.
func TestSweepWaitsForRenewalInFlight(t *testing.T) {
	for _, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			d := newDriver(t, viaOpen)
			w, err := New(sessionPool(t, iso), d.prefix)
			if err != nil {
				t.Fatal(err)
			}
			var wconn int64
			if err := w.db.QueryRowContext(ctxT(t), "SELECT CONNECTION_ID()").Scan(&wconn); err != nil {
				t.Fatal(err)
			}
			failed := 0
			rounds := sweepRounds(t)
			for i := range rounds {
				if sweepRound(t, d, w, wconn, "job"+strconv.Itoa(i)) {
					failed++
				}
			}
			t.Logf("%s: the sweep marked a live run lost in %d of %d rounds", iso, failed, rounds)
			if failed > 0 {
				t.Errorf("%s: the sweep marked a live run lost in %d of %d rounds", iso, failed, rounds)
			}
		})
	}
}

// sweepRound runs one round and reports whether the sweep marked the live
// run lost.
func sweepRound(t *testing.T, d, w *Driver, wconn int64, name string) bool {
	t.Helper()
	ctx := ctxT(t)
	// The renewal must reach the server within the TTL; on a loaded machine
	// the TTL grows until it does.
	for ttl := int64(500); ; ttl *= 2 {
		if ttl > 60_000 {
			t.Fatal("the renewal never reached the server within the lease's TTL")
		}
		a := mustAcquire(t, d, name, "A", ttl)
		runID, ok, err := d.RunStart(ctx, driver.StartRunParams{Token: a})
		if err != nil || !ok {
			if err == nil && !ok {
				continue // lapsed before its start: try a longer TTL
			}
			t.Fatalf("run start: %v %v", ok, err)
		}
		before, _, err := d.LeaseGet(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		oldUntil := before.LeasedUntilMs
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := tx.ExecContext(ctx, d.q["lease_renew"], int64(60_000), a.Name, a.Owner, a.Fence)
		n, err := affected(res, err)
		if err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
		if n == 0 {
			tx.Rollback()
			if _, err := d.RunMarkLost(ctx, runID, a.Fence, "test: renewal too late"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// Wait until the old expiry has passed by the database clock.
		for {
			now, err := d.Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if now > oldUntil+5 {
				break
			}
			time.Sleep(time.Duration(oldUntil+5-now) * time.Millisecond)
		}
		type result struct {
			n   int64
			err error
		}
		swept := make(chan result, 1)
		go func() {
			n, err := w.RunSweep(ctx)
			swept <- result{n, err}
		}()
		// The sweep is under way (or done) before the renewal commits.
		var r result
		got := false
		for deadline := time.Now().Add(20 * time.Second); !got; {
			select {
			case r = <-swept:
				got = true
				continue
			case <-time.After(10 * time.Millisecond):
			}
			var blocked int
			if err := d.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'", wconn).Scan(&blocked); err != nil {
				t.Fatal(err)
			}
			if blocked > 0 || time.Now().After(deadline) {
				break
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if !got {
			r = <-swept
		}
		if r.err != nil {
			t.Fatalf("sweep: %v", r.err)
		}
		held, err := d.LeaseIsHeld(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if !held {
			t.Fatal("the renewal committed but the lease is not held")
		}
		run, _, err := d.RunGet(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		finished, err := d.RunFinish(ctx, driver.FinishRunParams{ID: runID, Token: a, Status: driver.RunSucceeded})
		if err != nil {
			t.Fatal(err)
		}
		lost := r.n > 0 || run.Status != driver.RunRunning || !finished
		if lost {
			t.Logf("round %s: sweep marked %d, run %s, holder's completion accepted %v, IsHeld %v", name, r.n, run.Status, finished, held)
		}
		return lost
	}
}

// The sweep locks run rows and then lease rows, a start locks the lease row
// and then run rows: the two can deadlock, and the driver retries the
// victim (none were in the runs so far). Sweeps racing starts, completions and renewals of the same leases
// at both isolation levels must all succeed (no deadlock surfaces, no lock
// wait timeout) and mark no run of a generation that stays valid.
func TestSweepConcurrentWithLedger(t *testing.T) {
	for _, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			d := newDriver(t, viaOpen)
			w, err := New(sessionPool(t, iso), d.prefix)
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			const names, rounds = 4, 40
			toks := make([]driver.TokenParams, names)
			for i := range toks {
				toks[i] = mustAcquire(t, d, "job"+strconv.Itoa(i), "A"+strconv.Itoa(i), 120_000)
			}
			before := deadlocks.Load()
			stop := make(chan struct{})
			sweepErr := make(chan error, 1)
			go func() {
				var marked int64
				for {
					select {
					case <-stop:
						if marked > 0 {
							sweepErr <- errors.New("the sweep marked " + strconv.FormatInt(marked, 10) + " runs of valid generations lost")
							return
						}
						sweepErr <- nil
						return
					default:
					}
					n, err := w.RunSweep(ctx)
					if err != nil {
						sweepErr <- err
						return
					}
					marked += n
				}
			}()
			var wg sync.WaitGroup
			errs := make(chan error, names)
			for _, tok := range toks {
				wg.Go(func() {
					for range rounds {
						id, ok, err := d.RunStart(ctx, driver.StartRunParams{Token: tok})
						if err != nil || !ok {
							errs <- errors.Join(err, errors.New("start refused"))
							return
						}
						if _, err := d.LeaseRenew(ctx, tok, 120_000); err != nil {
							errs <- err
							return
						}
						ok, err = d.RunFinish(ctx, driver.FinishRunParams{ID: id, Token: tok, Status: driver.RunSucceeded})
						if err != nil || !ok {
							errs <- errors.Join(err, errors.New("completion refused"))
							return
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if err := <-sweepErr; err != nil {
				t.Error(err)
			}
			t.Logf("%s: %d deadlock victims retried", iso, deadlocks.Load()-before)
		})
	}
}
