package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/testdb"
)

func TestParseURL(t *testing.T) {
	cfg, err := parseURL("mysql://u:p%40ss@db.example:3307/app?timeout=5s&readTimeout=7s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "u" || cfg.Passwd != "p@ss" || cfg.Net != "tcp" || cfg.Addr != "db.example:3307" || cfg.DBName != "app" {
		t.Errorf("config %+v", cfg)
	}
	if cfg.Timeout != 5*time.Second || cfg.ReadTimeout != 7*time.Second {
		t.Errorf("timeouts %v %v", cfg.Timeout, cfg.ReadTimeout)
	}
	if !cfg.ClientFoundRows || !cfg.InterpolateParams || cfg.Params["time_zone"] != "'+00:00'" {
		t.Errorf("defaults not applied: %+v", cfg)
	}

	cfg, err = parseURL("mysql://root@[::1]/app?clientFoundRows=true&interpolateParams=false&time_zone=%27%2B00%3A00%27&autocommit=1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "[::1]:3306" || cfg.Passwd != "" {
		t.Errorf("addr %q", cfg.Addr)
	}
	if !cfg.ClientFoundRows || cfg.InterpolateParams || cfg.Params["time_zone"] != "'+00:00'" || cfg.Params["autocommit"] != "1" {
		t.Errorf("settings: %+v %v", cfg, cfg.Params)
	}

	cfg, err = parseURL("mysql://root@localhost/app?socket=/run/mysqld/mysqld.sock")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net != "unix" || cfg.Addr != "/run/mysqld/mysqld.sock" || cfg.Params["socket"] != "" {
		t.Errorf("socket config %+v", cfg)
	}
}

// No error from Open, and none from connecting, may contain the password.
func TestOpenErrorsNeverContainThePassword(t *testing.T) {
	const secret = "Sup3rS3cr3t"
	esc := url.QueryEscape(secret)
	for _, dsn := range []string{
		"mysql://root:" + secret + "@127.0.0.1:notaport/test",
		"mysql://root:" + secret + "/x@127.0.0.1:3306/test",  // unescaped '/' in the password
		"mysql://root:" + secret + "%zz@127.0.0.1:3306/test", // bad escape
		"mysql://root:" + secret + "@127.0.0.1:3306/",
		"mysql://root:" + secret + "@127.0.0.1:3306/a/b",
		"mysql://root:" + secret + "@/test",
		"postgres://root:" + secret + "@127.0.0.1/test",
		"mysql://root:" + secret + "@127.0.0.1:3306/test?timeout=" + esc,
		"mysql://root:" + secret + "@127.0.0.1:3306/test?clientFoundRows=" + esc,
		"mysql://root:" + secret + "@127.0.0.1:3306/test?charset=gbk",
		"mysql://root:" + secret + "@127.0.0.1:3306/test?password=" + esc,
		"mysql://root:" + secret + "#x@y@127.0.0.1:3306/test",
		"mysql://root:" + secret + "?x/y@127.0.0.1:3306/test",
		"mysql://root:Xy7#" + secret + "/z@127.0.0.1:3306/test",
		"mysql://root:" + secret + "@127.0.0.1:3306/test?tls=" + esc,
		"mysql://root:" + secret + "@127.0.0.1:3306/test?loc=" + esc,
	} {
		db, err := Open(dsn)
		if err == nil {
			db.Close()
			t.Errorf("Open(%q) accepted a bad DSN", strings.ReplaceAll(dsn, secret, "***"))
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), secret[:6]) || strings.Contains(err.Error(), "Xy7") {
			t.Errorf("error quotes the password: %v", err)
		}
	}
	// A wrong password against the real server, and an unreachable server.
	db := openDB(t, viaOpen) // skips when the server is unreachable
	db.Close()
	cfg, _ := parseURL(testdb.MySQLDSN())
	for _, dsn := range []string{
		fmt.Sprintf("mysql://%s:%s@%s/%s", cfg.User, secret, cfg.Addr, cfg.DBName),
		fmt.Sprintf("mysql://%s:%s@127.0.0.1:1/%s?timeout=1s", cfg.User, secret, cfg.DBName),
	} {
		db, err := Open(dsn)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
		db.Close()
		if err == nil {
			t.Fatalf("ping with a wrong password or port succeeded")
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("connect error quotes the password: %v", err)
		}
		t.Logf("connect error: %v", err)
	}
}

// Passwords are split the way pgx splits postgres:// URLs: '#', '?' and ':'
// are password bytes; '/' and '@' must be percent-encoded, and a DSN where
// they are not is refused rather than read another way.
func TestParseURLPasswords(t *testing.T) {
	for dsn, want := range map[string]string{
		"mysql://app:2024#Summer@127.0.0.1:3306/test": "2024#Summer",
		"mysql://app:a?b:c@127.0.0.1:3306/test":       "a?b:c",
		"mysql://app:a%2Fb%40c%25@127.0.0.1/test":     "a/b@c%",
	} {
		cfg, err := parseURL(dsn)
		if err != nil {
			t.Errorf("%s: %v", dsn, err)
			continue
		}
		if cfg.User != "app" || cfg.Passwd != want || cfg.Addr != "127.0.0.1:3306" || cfg.DBName != "test" {
			t.Errorf("%s: user %q password %q addr %q db %q", dsn, cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName)
		}
	}
	for _, dsn := range []string{
		"mysql://app:a/b@127.0.0.1:3306/test",
		"mysql://app:a@b@127.0.0.1:3306/test",
		"mysql://app:50%off@127.0.0.1:3306/test",
	} {
		if _, err := parseURL(dsn); err == nil {
			t.Errorf("%s: accepted", dsn)
		}
	}
}

// The allow-list: go-sql-driver sends an unknown parameter as SET k = v,
// so ?password=PASSWORD('x') once changed the account's password. Each of
// these is refused before anything is sent (no server needed).
func TestParseURLAllowList(t *testing.T) {
	for _, q := range []string{
		"password=PASSWORD(%27x%27)", "sql_mode=%27%27", "autocommit=0", "autocommit=OFF",
		"clientFoundRows=false", "time_zone=%27-05%3A00%27", "time_zone=SYSTEM",
		"tx_isolation=%27READ-UNCOMMITTED%27", "tx_isolation=READ-COMMITTED", "innodb_lock_wait_timeout=1%3BDROP",
		"charset=utf8mb4%20COLLATE%20x", "collation=a%27b", "strict=true", "allowAllFiles=true",
		"parseTime=maybe", "timeout=1s&timeout=2s", "init_connect=x", "wait_timeout=1",
	} {
		_, err := parseURL("mysql://root@127.0.0.1:1/test?" + q)
		var se *driver.SettingError
		if !errors.As(err, &se) {
			t.Errorf("%s: %v, want a SettingError", q, err)
		}
	}
	for _, q := range []string{
		"tls=false", "timeout=5s&readTimeout=1s&writeTimeout=1s", "charset=utf8mb4", "collation=utf8mb4_bin",
		"loc=UTC&parseTime=true", "tx_isolation=%27REPEATABLE-READ%27", "transaction_isolation=%27read-committed%27",
		"innodb_lock_wait_timeout=5", "multiStatements=true", "autocommit=1", "clientFoundRows=true",
		"time_zone=%27UTC%27", "maxAllowedPacket=0", "socket=/run/mysqld/mysqld.sock", "rejectReadOnly=true",
	} {
		if _, err := parseURL("mysql://root@127.0.0.1:1/test?" + q); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// CheckSession on the real server: Open's handle passes; a plain
// go-sql-driver handle (no clientFoundRows) and one with autocommit=0 are
// refused, each naming the setting.
func TestCheckSession(t *testing.T) {
	ctx := ctxT(t)
	if err := newDriver(t, viaOpen).CheckSession(ctx); err != nil {
		t.Errorf("Open's handle: %v", err)
	}
	var se *driver.SettingError
	if err := newDriver(t, viaPlain).CheckSession(ctx); !errors.As(err, &se) || !strings.Contains(err.Error(), "clientFoundRows") {
		t.Errorf("plain handle: %v", err)
	}
	db := openWithSession(t, "autocommit", "0")
	d, err := New(db, testdb.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CheckSession(ctx); !errors.As(err, &se) || !strings.Contains(err.Error(), "autocommit=0") {
		t.Errorf("autocommit=0: %v", err)
	}
	// A client character set in which a backslash can end a character:
	// the server would read a literal's end where fence does not.
	gbk := openWithSession(t, "character_set_client", "gbk")
	d3, err := New(gbk, testdb.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	if err := d3.CheckSession(ctx); !errors.As(err, &se) || !strings.Contains(err.Error(), "gbk") {
		t.Errorf("character_set_client=gbk: %v", err)
	}
	// The check drops its temporary table: twice on a one-connection
	// handle, the second CREATE would fail otherwise.
	one := openDB(t, viaOpen)
	one.SetMaxOpenConns(1)
	d2, err := New(one, testdb.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := d2.CheckSession(ctx); err != nil {
			t.Fatalf("check %d on one connection: %v", i+1, err)
		}
	}
}

// Open's handle runs interpolated, UTC sessions with clientFoundRows.
func TestOpenSession(t *testing.T) {
	db := openDB(t, viaOpen)
	var tz string
	if err := db.QueryRowContext(ctxT(t), "SELECT @@session.time_zone").Scan(&tz); err != nil {
		t.Fatal(err)
	}
	if tz != "+00:00" {
		t.Errorf("session time zone %q", tz)
	}
	var autocommit int
	if err := db.QueryRowContext(ctxT(t), "SELECT @@session.autocommit").Scan(&autocommit); err != nil || autocommit != 1 {
		t.Errorf("autocommit %d %v", autocommit, err)
	}
}

func TestIsRetryable(t *testing.T) {
	d := &Driver{}
	opErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		err       error
		retryable bool
		server    bool
	}{
		{&gomysql.MySQLError{Number: 1213}, true, true},
		{&gomysql.MySQLError{Number: 1205}, true, true},
		{&gomysql.MySQLError{Number: 1053}, true, true},
		{&gomysql.MySQLError{Number: 1927}, true, true},
		{&gomysql.MySQLError{Number: 2006}, true, true},
		{&gomysql.MySQLError{Number: 2013}, true, true},
		{&gomysql.MySQLError{Number: 1040}, true, true},
		{&gomysql.MySQLError{Number: 4031}, true, true},
		{&gomysql.MySQLError{Number: 1062}, false, true},
		{&gomysql.MySQLError{Number: 1146}, false, true},
		{&gomysql.MySQLError{Number: 1064}, false, true},
		{fmt.Errorf("wrapped: %w", &gomysql.MySQLError{Number: 1213}), true, true},
		// After a committed write, even the server's error leaves the outcome open.
		{afterWrite(&gomysql.MySQLError{Number: 1927}), true, false},
		{afterWrite(&gomysql.MySQLError{Number: 1064}), false, false},
		{gomysql.ErrInvalidConn, true, false},
		{sqldriver.ErrBadConn, true, false},
		{sql.ErrConnDone, true, false},
		{io.ErrUnexpectedEOF, true, false},
		{opErr, true, false},
		// A connection that was never made sent nothing: definite.
		{fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true, true},
		{context.Canceled, false, false},
		{context.DeadlineExceeded, false, false},
		{sql.ErrNoRows, false, false},
		{errors.New("something else"), false, false},
		{nil, false, false},
	} {
		if got := d.IsRetryable(tc.err); got != tc.retryable {
			t.Errorf("IsRetryable(%v) = %v", tc.err, got)
		}
		if got := d.IsServerError(tc.err); got != tc.server {
			t.Errorf("IsServerError(%v) = %v", tc.err, got)
		}
	}
}

// Real server errors are classified as such: a lock wait timeout and a
// killed connection are retryable, a syntax error is not.
func TestIsRetryableOnServerErrors(t *testing.T) {
	d := newDriver(t, viaOpen)
	ctx := ctxT(t)
	a := mustAcquire(t, d, "job", "A", 60_000)
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if ok, err := d.LockTx(ctx, tx, a); err != nil || !ok {
		t.Fatal(ok, err)
	}
	err = takeover(ctx, d.db, d, "job", 1)
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1205 || !d.IsRetryable(err) || !d.IsServerError(err) {
		t.Errorf("lock wait timeout: %v retryable=%v", err, d.IsRetryable(err))
	}
	tx.Rollback()

	_, err = d.db.ExecContext(ctx, "SELEC 1")
	if err == nil || d.IsRetryable(err) || !d.IsServerError(err) {
		t.Errorf("syntax error: %v retryable=%v", err, d.IsRetryable(err))
	}

	// A connection killed mid-statement.
	c, err := d.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var id int64
	if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		d.db.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
	}()
	_, err = c.ExecContext(ctx, "SELECT SLEEP(5)")
	if err == nil || !d.IsRetryable(err) {
		t.Errorf("killed connection: %v retryable=%v", err, d.IsRetryable(err))
	}
	t.Logf("killed connection gives: %v (server error: %v)", err, d.IsServerError(err))
}
