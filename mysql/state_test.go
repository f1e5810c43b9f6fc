package mysql

import (
	"context"
	"testing"

	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/testdb"
)

// TestStateColumnKeepsItsSize: schema version 4 makes state a CHAR(8), so
// that acquire and release, which switch it between 'held' and 'released',
// update the row in place (an InnoDB record is rebuilt when a field changes
// size). Every state must fit: a longer one would be refused by strict mode
// or cut short without it.
func TestStateColumnKeepsItsSize(t *testing.T) {
	d := newDriver(t, viaOpen)
	var typ string
	var n int64
	err := d.db.QueryRowContext(ctxT(t), `SELECT DATA_TYPE, CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'state'`, d.prefix+"leases").Scan(&typ, &n)
	if err != nil {
		t.Fatal(err)
	}
	if typ != "char" || n != 8 {
		t.Errorf("state is %s(%d), want char(8)", typ, n)
	}
	for _, s := range []string{driver.StateHeld, driver.StateReleased, driver.StateRevoked} {
		if len(s) > int(n) {
			t.Errorf("state %q does not fit in char(%d)", s, n)
		}
	}
}

// TestStateUnderPadCharMode: a session whose sql_mode has
// PAD_CHAR_TO_FULL_LENGTH reads a CHAR back padded ("held    "); the
// driver still reports the state as written, in every read.
func TestStateUnderPadCharMode(t *testing.T) {
	db := openWithSession(t, "sql_mode", "CONCAT(@@sql_mode, ',PAD_CHAR_TO_FULL_LENGTH')")
	ctx := ctxT(t)
	var mode, raw string
	if err := db.QueryRowContext(ctx, "SELECT @@session.sql_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	d, err := New(db, testdb.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.DropTables(context.Background()) })
	if _, err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tok := mustAcquire(t, d, "padded", "o1", 60_000)
	if err := db.QueryRowContext(ctx, "SELECT state FROM "+d.prefix+"leases WHERE lease_name = 'padded'").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if raw != "held    " {
		t.Fatalf("sql_mode %s: the column reads %q, not padded: this test checks nothing", mode, raw)
	}
	want := func(when, state string) {
		t.Helper()
		l, ok, err := d.LeaseGet(ctx, "padded")
		if err != nil || !ok || l.State != state {
			t.Errorf("%s: Get: %q, %v, %v; want %q", when, l.State, ok, err, state)
		}
		ls, _, err := d.LeaseList(ctx, driver.LeaseFilter{})
		if err != nil || len(ls) != 1 || ls[0].State != state {
			t.Errorf("%s: List: %+v, %v; want one %q", when, ls, err, state)
		}
		st, err := d.Stats(ctx, 10)
		if err != nil || len(st.Leases) != 1 || st.Leases[0].State != state {
			t.Errorf("%s: Stats: %+v, %v; want one %q", when, st.Leases, err, state)
		}
	}
	want("held", driver.StateHeld)
	if ok, err := d.LeaseRelease(ctx, tok); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	want("released", driver.StateReleased)
}
