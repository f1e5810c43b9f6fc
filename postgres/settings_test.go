package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/testdb"
)

// Open and NewPoolConfig force READ COMMITTED and read-write defaults, and
// refuse a DSN that asks for something else (also through options=-c,
// which the server applies after the startup parameters).
func TestForcedSettingsInDSN(t *testing.T) {
	const base = "postgres://u:pw@127.0.0.1:1/db?sslmode=disable"
	for _, q := range []string{
		"default_transaction_read_only=on", "Default_Transaction_Read_Only=true",
		"default_transaction_isolation=serializable", "default_transaction_isolation=repeatable%20read",
		"options=-c%20default_transaction_read_only%3Don", "options=-c%20default_transaction_isolation%3Dserializable",
		"synchronous_commit=off", "synchronous_commit=false",
		"client_encoding=SJIS", "options=-c%20client_encoding%3DBIG5",
	} {
		var se *driver.SettingError
		if _, err := NewConnector(base + "&" + q); !errors.As(err, &se) {
			t.Errorf("NewConnector %s: %v, want a SettingError", q, err)
		}
		if _, err := NewPoolConfig(base + "&" + q); !errors.As(err, &se) {
			t.Errorf("NewPoolConfig %s: %v, want a SettingError", q, err)
		}
	}
	cfg, err := NewPoolConfig(base + "&default_transaction_isolation=read%20committed&synchronous_commit=local&search_path=s")
	if err != nil {
		t.Fatal(err)
	}
	rp := cfg.ConnConfig.RuntimeParams
	if rp["default_transaction_isolation"] != "read committed" || rp["default_transaction_read_only"] != "off" || rp["synchronous_commit"] != "local" || rp["search_path"] != "s" {
		t.Errorf("runtime params %v", rp)
	}
}

// On the real server: the forced settings win over a role's or database's
// defaults because they travel in the startup packet; CheckSession sees
// them, on database/sql and on pgxpool alike.
func TestCheckSessionOnServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := Open(testdb.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		testdb.Unreachable(t, "postgres", "FENCE_TEST_POSTGRES", err)
	}
	d, err := New(db, testdb.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CheckSession(ctx); err != nil {
		t.Errorf("Open's handle: %v", err)
	}
	var iso, ro string
	if err := db.QueryRowContext(ctx, "SELECT current_setting('default_transaction_isolation'), current_setting('default_transaction_read_only')").Scan(&iso, &ro); err != nil || iso != "read committed" || ro != "off" {
		t.Errorf("session %q %q %v", iso, ro, err)
	}

	// A client encoding in which a backslash can end a character: the
	// server would read a literal's end where fence does not.
	sjis, err := sql.Open("pgx", testdb.PostgresDSN()+"&client_encoding=SJIS")
	if err != nil {
		t.Fatal(err)
	}
	defer sjis.Close()
	ds, err := New(sjis, testdb.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.CheckSession(ctx); err == nil || !strings.Contains(err.Error(), "client_encoding is SJIS") {
		t.Errorf("client_encoding=SJIS: %v", err)
	}

	cfg, err := NewPoolConfig(testdb.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on" // as a caller might after NewPoolConfig
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pd, err := NewPool(pool, testdb.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	var se *driver.SettingError
	if err := pd.CheckSession(ctx); !errors.As(err, &se) || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("read-only pool: %v", err)
	}
}
