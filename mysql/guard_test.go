package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencekit/fence/internal/driver"
)

// workTable creates the user's table that the fenced writes change.
func workTable(t testing.TB, d *Driver) string {
	t.Helper()
	name := d.prefix + "work"
	ctx := ctxT(t)
	for _, q := range []string{
		"CREATE TABLE " + name + " (id INT PRIMARY KEY, v VARCHAR(64) NOT NULL, note VARCHAR(64) NOT NULL DEFAULT '') ENGINE = InnoDB",
		"INSERT INTO " + name + " (id, v) VALUES (1, 'one'), (2, 'two'), (3, 'three'), (4, 'four')",
	} {
		if _, err := d.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { d.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+name) })
	return name
}

// fencedWrite is a user statement with the guard composed in, placeholders
// of the user's own before and after the guard's.
type fencedWrite struct {
	name string
	sql  func(table, guard string) string
	args func(guard []any) []any
}

var fencedWrites = []fencedWrite{
	{"update",
		func(tb, g string) string {
			return "UPDATE " + tb + " SET v = ? WHERE id = ? AND " + g + " AND note <> ?"
		},
		func(g []any) []any { return append(append([]any{"written", 1}, g...), "never") }},
	{"delete",
		func(tb, g string) string { return "DELETE FROM " + tb + " WHERE id = ? AND " + g + " AND v <> ?" },
		func(g []any) []any { return append(append([]any{1}, g...), "never") }},
	{"insert-select",
		func(tb, g string) string {
			return "INSERT INTO " + tb + " (id, v, note) SELECT ?, ?, ? FROM DUAL WHERE " + g + " AND ? > 0"
		},
		func(g []any) []any { return append(append([]any{100, "inserted", "n"}, g...), 1) }},
}

func tableState(t testing.TB, d *Driver, table string) string {
	t.Helper()
	rows, err := d.db.QueryContext(ctxT(t), "SELECT id, v, note FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id int
		var v, note string
		if err := rows.Scan(&id, &v, &note); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%d=%s/%s ", id, v, note)
	}
	return b.String()
}

func TestGuardComposesIntoUserStatements(t *testing.T) {
	forEachHandle(t, func(t *testing.T, d *Driver) {
		ctx := ctxT(t)
		table := workTable(t, d)
		a := mustAcquire(t, d, "job", "A", 60_000)
		stale := []driver.TokenParams{
			{Name: "job", Owner: "A", Fence: a.Fence + 1},
			{Name: "job", Owner: "B", Fence: a.Fence},
			{Name: "nojob", Owner: "A", Fence: a.Fence},
		}
		for _, w := range fencedWrites {
			before := tableState(t, d, table)
			for _, s := range stale {
				g, gargs := d.GuardSQL(s, 1)
				res, err := d.db.ExecContext(ctx, w.sql(table, g), w.args(gargs)...)
				if err != nil {
					t.Fatalf("%s with %+v: %v", w.name, s, err)
				}
				if n, _ := res.RowsAffected(); n != 0 {
					t.Errorf("%s with stale %+v affected %d rows", w.name, s, n)
				}
			}
			if after := tableState(t, d, table); after != before {
				t.Errorf("%s: stale tokens changed the table: %s -> %s", w.name, before, after)
			}
			g, gargs := d.GuardSQL(a, 1)
			res, err := d.db.ExecContext(ctx, w.sql(table, g), w.args(gargs)...)
			if err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Errorf("%s with the valid token affected %d rows", w.name, n)
			}
		}
		if got, want := tableState(t, d, table), "2=two/ 3=three/ 4=four/ 100=inserted/n "; got != want {
			t.Errorf("table %s, want %s", got, want)
		}
		// A multi-row statement gets one verdict for all its rows.
		g, gargs := d.GuardSQL(a, 1)
		res, err := d.db.ExecContext(ctx, "UPDATE "+table+" SET note = ? WHERE id >= ? AND "+g, append([]any{"all", 0}, gargs...)...)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 4 {
			t.Errorf("multi-row guarded update affected %d rows", n)
		}
		// An expired token is refused.
		short := mustAcquire(t, d, "short", "A", 50)
		time.Sleep(100 * time.Millisecond)
		g, gargs = d.GuardSQL(short, 1)
		res, err = d.db.ExecContext(ctx, "UPDATE "+table+" SET note = 'late' WHERE "+g, gargs...)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 0 {
			t.Errorf("expired token's guarded update affected %d rows", n)
		}
		if d.Placeholder() != "?" {
			t.Errorf("placeholder %q", d.Placeholder())
		}
	})
}

// lockProbe is a statement that reads the lease row inside a transaction and
// is then left open, to see whether it holds off a takeover.
type lockProbe struct {
	name string
	// run executes the probe in tx for token a; it must affect or find one row.
	run func(t *testing.T, d *Driver, tx *sql.Tx, table string, a driver.TokenParams) int64
}

// plainGuard is the guard without LOCK IN SHARE MODE: the control that shows
// what the share lock is for.
func plainGuard(d *Driver) string {
	return strings.Replace(d.q["guard"], " LOCK IN SHARE MODE", "", 1)
}

func execAffected(t *testing.T, tx *sql.Tx, q string, args ...any) int64 {
	t.Helper()
	res, err := tx.ExecContext(ctxT(t), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func guardProbe(w fencedWrite, plain bool) lockProbe {
	name := w.name
	if plain {
		name = "plain-" + name
	}
	return lockProbe{name, func(t *testing.T, d *Driver, tx *sql.Tx, table string, a driver.TokenParams) int64 {
		g, args := d.GuardSQL(a, 1)
		if plain {
			g = plainGuard(d)
		}
		return execAffected(t, tx, w.sql(table, g), w.args(args)...)
	}}
}

var (
	probeLockTx = lockProbe{"locktx", func(t *testing.T, d *Driver, tx *sql.Tx, _ string, a driver.TokenParams) int64 {
		ok, err := d.LockTx(ctxT(t), tx, a)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return 1
		}
		return 0
	}}
	// The article's form: a multi-table UPDATE joining the lease row.
	probeJoin = lockProbe{"update-join", func(t *testing.T, d *Driver, tx *sql.Tx, table string, a driver.TokenParams) int64 {
		return execAffected(t, tx, "UPDATE "+table+" AS w JOIN "+d.prefix+"leases AS l ON l.lease_name = ? SET w.v = 'joined' WHERE w.id = 1 AND l.owner_token = ? AND l.fence_token = ? AND l.leased_until_ms > "+nowMs, a.Name, a.Owner, a.Fence)
	}}
)

// takeover moves the lease to fence+1 the way an acquisition after expiry
// or a revoke does: by updating the lease row. It returns the error, nil
// when it went through.
func takeover(ctx context.Context, db *sql.DB, d *Driver, name string, lockWaitSec int) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = %d", lockWaitSec)); err != nil {
		return err
	}
	_, err = c.ExecContext(ctx, "UPDATE "+d.prefix+"leases SET owner_token = 'B', fence_token = fence_token + 1, leased_until_ms = "+nowMs+" + 60000 WHERE lease_name = ?", name)
	return err
}

// blocks runs probe in a transaction at isolation iso, leaves it open, and
// reports whether a takeover of the lease then had to wait for it. With
// inspect it also reads the mode of the lock the takeover waits for from
// information_schema (MariaDB; MySQL 8 moved it to performance_schema):
// InnoDB refreshes that view only when nobody read it for 100 ms, so the
// polling is slow and such tests must not run in parallel.
func blocks(t *testing.T, d *Driver, iso string, p lockProbe, inspect bool) (blocked bool, mode string) {
	ctx := ctxT(t)
	table := workTable(t, d)
	a := mustAcquire(t, d, "job", "A", 60_000)
	c := sessionConn(t, d.db, iso, 10)
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if n := p.run(t, d, tx, table, a); n != 1 {
		t.Fatalf("%s: probe affected %d rows, want 1", p.name, n)
	}
	done := make(chan error, 1)
	go func() { done <- takeover(ctx, d.db, d, "job", 10) }()
	for i := 0; i < 8 && (i < 3 || (inspect && mode == "")); i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("takeover: %v", err)
			}
			return false, ""
		case <-time.After(150 * time.Millisecond):
		}
		if !inspect {
			continue
		}
		err := d.db.QueryRowContext(ctx, "SELECT b.lock_mode FROM information_schema.INNODB_LOCK_WAITS AS w JOIN information_schema.INNODB_LOCKS AS b ON b.lock_id = w.blocking_lock_id WHERE b.lock_table LIKE ?", "%"+d.prefix+"leases%").Scan(&mode)
		var me *gomysql.MySQLError
		switch {
		case errors.As(err, &me) && me.Number == 1109: // no such table: MySQL 8
			inspect = false
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("takeover: %v", err)
		}
		return false, ""
	default:
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("takeover after commit: %v", err)
	}
	return true, mode
}

// Every guarded form must hold a share lock on the lease row until its
// transaction ends, under REPEATABLE READ and READ COMMITTED. The plain
// EXISTS (no LOCK IN SHARE MODE) is the control: InnoDB reads it without a
// lock in a single-table UPDATE and an INSERT ... SELECT under READ
// COMMITTED.
func TestGuardShareLocksLeaseRow(t *testing.T) {
	probes := []lockProbe{probeLockTx, probeJoin}
	for _, w := range fencedWrites {
		probes = append(probes, guardProbe(w, false))
	}
	for _, iso := range isolations {
		for _, p := range probes {
			t.Run(iso+"/"+p.name, func(t *testing.T) {
				d := newDriver(t, viaOpen)
				blocked, mode := blocks(t, d, iso, p, true)
				if !blocked {
					t.Fatalf("a takeover went through while %s's transaction was open", p.name)
				}
				t.Logf("the takeover waited for a lock in mode %q", mode)
				if d.isMariaDB(t) && mode != "S" {
					t.Errorf("takeover waited for a %q lock, want S", mode)
				}
			})
		}
	}
}

// What the plain EXISTS does, recorded rather than relied on: it is why the
// guard says LOCK IN SHARE MODE.
func TestPlainExistsLocking(t *testing.T) {
	want := map[string]bool{
		// InnoDB reads the subquery with a share lock in data-changing
		// statements under REPEATABLE READ (for statement-based binlogging) ...
		"REPEATABLE READ/plain-update":        true,
		"REPEATABLE READ/plain-delete":        true,
		"REPEATABLE READ/plain-insert-select": true,
		// ... and under READ COMMITTED only in DELETE: single-table UPDATE and
		// INSERT ... SELECT fall back to a consistent read.
		"READ COMMITTED/plain-update":        false,
		"READ COMMITTED/plain-delete":        true,
		"READ COMMITTED/plain-insert-select": false,
	}
	for _, iso := range isolations {
		for _, w := range fencedWrites {
			p := guardProbe(w, true)
			t.Run(iso+"/"+p.name, func(t *testing.T) {
				t.Parallel()
				d := newDriver(t, viaOpen)
				blocked, _ := blocks(t, d, iso, p, false)
				t.Logf("%s %s: takeover blocked=%v", iso, p.name, blocked)
				if d.isMariaDB(t) && blocked != want[iso+"/"+p.name] {
					t.Errorf("blocked=%v, expected %v from MariaDB 10.11", blocked, want[iso+"/"+p.name])
				}
			})
		}
	}
}

func (d *Driver) isMariaDB(t testing.TB) bool {
	var v string
	if err := d.db.QueryRowContext(ctxT(t), "SELECT VERSION()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(v, "MariaDB")
}

// Store.Exec's statements run prepared, cached by text: a valid token
// writes, a stale one does not, and past the cache's bounds (count and
// length) statements still run, ad hoc.
func TestPreparedExecer(t *testing.T) {
	forEachHandle(t, func(t *testing.T, d *Driver) {
		ctx := ctxT(t)
		table := workTable(t, d)
		a := mustAcquire(t, d, "job", "A", 60_000)
		stale := driver.TokenParams{Name: "job", Owner: "A", Fence: a.Fence + 1}
		x := d.PreparedExecer()
		calls := 0
		run := func(q string, tok driver.TokenParams) int64 {
			t.Helper()
			calls++ // a new value each time: the plain handle counts changed rows
			g, gargs := d.GuardSQL(tok, 1)
			res, err := x.ExecContext(ctx, strings.Replace(q, "{{fence}}", g, 1), append(append([]any{"w" + strconv.Itoa(calls)}, gargs...), 1)...)
			if err != nil {
				t.Fatalf("%.60s: %v", q, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		q := "UPDATE " + table + " SET v = ? WHERE {{fence}} AND id = ?"
		for range 2 {
			if n := run(q, stale); n != 0 {
				t.Errorf("stale token wrote %d rows", n)
			}
			if n := run(q, a); n != 1 {
				t.Errorf("valid token wrote %d rows", n)
			}
		}
		g, _ := d.GuardSQL(a, 1)
		if st, _ := d.fencedStmt(ctx, strings.Replace(q, "{{fence}}", g, 1)); st == nil {
			t.Error("the statement is not kept prepared")
		}
		long := "UPDATE " + table + " SET v = ? WHERE {{fence}} AND id = ? /*" + strings.Repeat("x", maxFencedLen) + "*/"
		if n := run(long, a); n != 1 {
			t.Errorf("long statement wrote %d rows", n)
		}
		for i := range maxFenced + 2 {
			if n := run(q+" AND "+strconv.Itoa(i)+" = "+strconv.Itoa(i), a); n != 1 {
				t.Fatalf("statement %d wrote %d rows", i, n)
			}
		}
		d.stmts.mu.Lock()
		n := len(d.stmts.fenced)
		d.stmts.mu.Unlock()
		if n != maxFenced {
			t.Errorf("%d statements kept, want %d", n, maxFenced)
		}
	})
}
