package mysql

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencekit/fence/internal/driver"
)

// A server whose default is autocommit=0 (--autocommit=0, as in my.cnf):
// Open's connections run with autocommit=1 anyway, and a plain handle to it
// is refused by CheckSession. Before, an acquire through Open returned fence
// 1, IsHeld said true, and once that pooled connection closed a second
// store acquired fence 1 again.
//
// The shared test server's global settings must not change, so this starts
// a scratch MariaDB of its own (mariadb-install-db and mariadbd on PATH, 20-30 s)
// and stops it; it runs only with FENCE_TEST_SCRATCH_MARIADB=1.
func TestServerDefaultAutocommitOff(t *testing.T) {
	if os.Getenv("FENCE_TEST_SCRATCH_MARIADB") != "1" {
		t.Skip("set FENCE_TEST_SCRATCH_MARIADB=1 to start a scratch MariaDB with --autocommit=0")
	}
	install, err1 := exec.LookPath("mariadb-install-db")
	server, err2 := exec.LookPath("mariadbd")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data, sock, tmp := filepath.Join(dir, "data"), filepath.Join(dir, "s.sock"), filepath.Join(dir, "tmp")
	// Its own tmpdir: a starting mariadbd deletes every #sql* file in its
	// tmpdir, which with the default /tmp are the shared server's temporary
	// tables in use by other packages' tests.
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(install, "--no-defaults", "--datadir="+data, "--tmpdir="+tmp, "--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	cmd := exec.Command(server, "--no-defaults", "--datadir="+data, "--tmpdir="+tmp, "--socket="+sock, "--skip-networking",
		"--user=root", "--skip-grant-tables", "--autocommit=0", "--skip-log-bin")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	plainCfg := gomysql.NewConfig()
	plainCfg.Net, plainCfg.Addr, plainCfg.User, plainCfg.ClientFoundRows = "unix", sock, "root", true
	conn, err := gomysql.NewConnector(plainCfg)
	if err != nil {
		t.Fatal(err)
	}
	plain := sql.OpenDB(conn)
	defer plain.Close()
	for plain.PingContext(ctx) != nil {
		select {
		case <-ctx.Done():
			t.Fatal("scratch server did not come up")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := plain.ExecContext(ctx, "CREATE DATABASE fence"); err != nil {
		t.Fatal(err)
	}
	var global int
	if err := plain.QueryRowContext(ctx, "SELECT @@global.autocommit").Scan(&global); err != nil || global != 0 {
		t.Fatalf("scratch server autocommit %d %v", global, err)
	}

	var se *driver.SettingError
	pd, err := New(plain, "fence_")
	if err != nil {
		t.Fatal(err)
	}
	if err := pd.CheckSession(ctx); !errors.As(err, &se) || !strings.Contains(err.Error(), "autocommit=0") {
		t.Errorf("plain handle on an autocommit=0 server: %v, want a SettingError naming autocommit=0", err)
	}

	dsn := "mysql://root@localhost/fence?socket=" + sock
	a := openScratch(t, dsn)
	if err := a.CheckSession(ctx); err != nil {
		t.Fatalf("Open's handle on an autocommit=0 server: %v", err)
	}
	if _, err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := a.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: "A", TTLMs: 60_000})
	if err != nil || !r.Acquired || r.Fence != 1 {
		t.Fatalf("A: %+v %v", r, err)
	}
	a.db.Close() // the connection that acquired goes away
	b := openScratch(t, dsn)
	r, err = b.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: "B", TTLMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Acquired {
		t.Fatalf("B acquired fence %d while A's fence 1 should hold: A's acquire never committed", r.Fence)
	}
}

func openScratch(t *testing.T, dsn string) *Driver {
	t.Helper()
	db, err := Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := New(db, "fence_")
	if err != nil {
		t.Fatal(err)
	}
	return d
}
