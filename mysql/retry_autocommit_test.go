package mysql

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/fencekit/fence/internal/driver"
)

// Open's handle has wsrep_retry_autocommit=0 on every session of a server
// that has the variable (MariaDB with wsrep, Galera on or off), though the
// server's default is 1: the first connection (the probe sets it) and the
// later ones (go-sql-driver's parameter). On MySQL, which has no such
// variable, the handle must still connect.
func TestOpenSetsRetryAutocommit(t *testing.T) {
	ctx := ctxT(t)
	db := openDB(t, viaOpen)
	// Every query on a new connection: the probe's and the parameter's
	// paths both run.
	db.SetMaxIdleConns(0)
	plain := openDB(t, viaPlain)
	var name, global string
	err := plain.QueryRowContext(ctx, "SHOW GLOBAL VARIABLES LIKE 'wsrep_retry_autocommit'").Scan(&name, &global)
	if errors.Is(err, sql.ErrNoRows) {
		for i := range 3 {
			if err := db.PingContext(ctx); err != nil {
				t.Fatalf("connection %d to a server without wsrep_retry_autocommit: %v", i+1, err)
			}
		}
		t.Skip("SKIP: the server has no wsrep_retry_autocommit (MySQL): Open's handle connects, nothing to set")
	}
	if err != nil {
		t.Fatal(err)
	}
	if global == "0" {
		t.Skip("SKIP: the server's wsrep_retry_autocommit is already 0: a handle that did not set it would read 0 too")
	}
	for i := range 4 {
		var v int64
		if err := db.QueryRowContext(ctx, "SELECT @@session.wsrep_retry_autocommit").Scan(&v); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		if v != 0 {
			t.Fatalf("connection %d of Open's handle: wsrep_retry_autocommit=%d (server default %s), want 0", i+1, v, global)
		}
	}
	// Several connections at once, on the same handle.
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	for i, c := range conns {
		var v int64
		if err := c.QueryRowContext(ctx, "SELECT @@session.wsrep_retry_autocommit").Scan(&v); err != nil || v != 0 {
			t.Fatalf("concurrent connection %d: wsrep_retry_autocommit=%d, %v; want 0", i+1, v, err)
		}
	}
}

// A caller's own pool, whose sessions re-run failed autocommit statements,
// cannot be changed by fence: on a Galera node CheckSession refuses it and
// the error names the fixes. The system server runs no cluster, so the
// driver's Galera question is answered yes here; the session value is the
// real server's.
func TestCheckSessionRefusesRetryAutocommit(t *testing.T) {
	ctx := ctxT(t)
	plain := openDB(t, viaPlain)
	var name, global string
	if err := plain.QueryRowContext(ctx, "SHOW GLOBAL VARIABLES LIKE 'wsrep_retry_autocommit'").Scan(&name, &global); err != nil {
		t.Skipf("SKIP: the server has no wsrep_retry_autocommit (MySQL): %v", err)
	}
	asGalera := func(d *Driver) { d.q["galera_detect"] = "SELECT 'wsrep_on', 'ON'" }

	user := openWithSession(t, "wsrep_retry_autocommit", "1")
	d, err := New(user, "")
	if err != nil {
		t.Fatal(err)
	}
	asGalera(d)
	err = d.CheckSession(ctx)
	var se *driver.SettingError
	if !errors.As(err, &se) {
		t.Fatalf("a Galera session with wsrep_retry_autocommit=1: %v, want a SettingError", err)
	}
	for _, fix := range []string{"wsrep_retry_autocommit=1", "mysql.Open", "fencedsn.Open", "wsrep_retry_autocommit=0 to go-sql-driver's DSN", "server configuration"} {
		if !strings.Contains(err.Error(), fix) {
			t.Errorf("the refusal does not name %q: %v", fix, err)
		}
	}

	// Open's handle on the same server passes the same check.
	d2, err := New(openDB(t, viaOpen), "")
	if err != nil {
		t.Fatal(err)
	}
	asGalera(d2)
	if err := d2.CheckSession(ctx); err != nil {
		t.Fatalf("Open's handle, asked as a Galera node: %v", err)
	}
}
