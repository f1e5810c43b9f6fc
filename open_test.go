package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencekit/fence/internal/testdb"
)

func ctxOpen(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// reachable skips t (or fails it under FENCE_REQUIRE_DBS=1) when the test
// server of dialect is down.
func reachable(t *testing.T, dialect Dialect) string {
	t.Helper()
	dsn, env := testdb.PostgresDSN(), "FENCE_TEST_POSTGRES"
	if dialect == MySQL {
		dsn, env = testdb.MySQLDSN(), "FENCE_TEST_MYSQL"
	}
	s, err := testOpen(ctxOpen(t), dsn)
	if err != nil {
		testdb.Unreachable(t, string(dialect), env, err)
	}
	s.Close()
	return dsn
}

// withParams appends query parameters to a DSN.
func withParams(dsn, params string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + params
	}
	return dsn + "?" + params
}

// Settings that broke atomicity or made fence unusable, given in the DSN:
// Open refuses each with ErrInvalid naming the setting, before anything is
// acquired. Before, autocommit=0 acquired fence 1 that never committed (a
// second store blocked on the row lock for 50 s, and got fence 1 again
// once the first connection went), and ?strict=true panicked in
// go-sql-driver.
func TestOpenRefusesSettingsInDSN(t *testing.T) {
	my := reachable(t, MySQL)
	pg := reachable(t, Postgres)
	for _, tc := range []struct{ dsn, want string }{
		{withParams(my, "autocommit=0"), "autocommit"},
		{withParams(my, "autocommit=OFF"), "autocommit"},
		{withParams(my, "clientFoundRows=false"), "clientFoundRows"},
		{withParams(my, "time_zone=%27-05%3A00%27"), "time_zone"},
		{withParams(my, "password=PASSWORD(%27x%27)"), `"password"`},
		{withParams(my, "sql_mode=%27%27"), `"sql_mode"`},
		{withParams(my, "tx_isolation=%27READ-UNCOMMITTED%27"), "tx_isolation"},
		{withParams(my, "transaction_isolation=%27READ-UNCOMMITTED%27"), "transaction_isolation"},
		{withParams(my, "innodb_lock_wait_timeout=1;DROP"), "innodb_lock_wait_timeout"},
		{withParams(my, "charset=utf8mb4%20COLLATE%20x"), "charset"},
		{withParams(my, "strict=true"), `"strict"`},
		{withParams(my, "allowAllFiles=true"), `"allowAllFiles"`},
		{withParams(my, "timeout=1s&timeout=2s"), "twice"},
		{withParams(pg, "default_transaction_read_only=on"), "default_transaction_read_only"},
		{withParams(pg, "default_transaction_isolation=serializable"), "default_transaction_isolation"},
		{withParams(pg, "default_transaction_isolation=repeatable%20read"), "default_transaction_isolation"},
		{withParams(pg, "options=-c%20default_transaction_read_only%3Don"), "options"},
		{withParams(pg, "synchronous_commit=off"), "synchronous_commit"},
	} {
		s, err := testOpen(ctxOpen(t), tc.dsn, WithPrefix(testdb.Prefix()))
		if err == nil {
			s.Close()
			t.Errorf("%s: opened", tc.dsn)
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrInvalid naming %s", tc.dsn, err, tc.want)
		}
	}
	// What fence forces may be written with the forced value, and the
	// useful allowed parameters pass.
	for _, dsn := range []string{
		withParams(my, "autocommit=1&clientFoundRows=true&time_zone=%27%2B00%3A00%27"),
		withParams(my, "tx_isolation=%27READ-COMMITTED%27&innodb_lock_wait_timeout=5&timeout=5s&charset=utf8mb4&parseTime=true"),
		withParams(pg, "default_transaction_isolation=read%20committed&default_transaction_read_only=off&synchronous_commit=on&application_name=fence-test"),
	} {
		s, err := testOpen(ctxOpen(t), dsn, WithPrefix(testdb.Prefix()))
		if err != nil {
			t.Errorf("%s: %v", dsn, err)
			continue
		}
		// Open migrated the store's tables: leave nothing in a shared
		// database.
		if err := s.DropTables(context.Background()); err != nil {
			t.Errorf("%s: drop tables: %v", dsn, err)
		}
		s.Close()
	}
}

// The MySQL transaction_isolation parameter exists under that name only in
// MySQL 8 (MariaDB 10.11: tx_isolation); an allowed parameter the server
// does not know fails on connect, as ErrUnavailable, not as a silent no-op.
func TestOpenMySQLIsolationParam(t *testing.T) {
	my := reachable(t, MySQL)
	for _, name := range []string{"tx_isolation", "transaction_isolation"} {
		s, err := testOpen(ctxOpen(t), withParams(my, name+"=%27READ-COMMITTED%27"))
		if err != nil {
			t.Logf("%s: %v", name, err)
			continue
		}
		var iso string
		err = s.DB().QueryRowContext(ctxOpen(t), "SELECT @@session."+name).Scan(&iso)
		s.Close()
		if err != nil || iso != "READ-COMMITTED" {
			t.Errorf("%s: %q %v", name, iso, err)
		}
	}
}

// mysqlHandle opens a go-sql-driver handle to the test server with cfg
// changed by edit, as a user who builds their own would.
func mysqlHandle(t *testing.T, edit func(*gomysql.Config)) *sql.DB {
	t.Helper()
	u := strings.TrimPrefix(reachable(t, MySQL), "mysql://")
	userinfo, rest, _ := strings.Cut(u, "@")
	hostport, db, _ := strings.Cut(rest, "/")
	db, _, _ = strings.Cut(db, "?")
	cfg := gomysql.NewConfig()
	cfg.User, cfg.Passwd, _ = strings.Cut(userinfo, ":")
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", hostport, db
	edit(cfg)
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := sql.OpenDB(c)
	t.Cleanup(func() { h.Close() })
	return h
}

// pgHandle opens a pgx stdlib handle with runtime parameters added.
func pgHandle(t *testing.T, params map[string]string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(reachable(t, Postgres))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	h := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { h.Close() })
	return h
}

// Handles the caller made: OpenDB checks the session and refuses the ones
// that break fence, naming the setting. Before, OpenDB accepted every one
// of them: with autocommit=0 an acquire returned fence 1 and nil while the
// row stayed uncommitted.
func TestOpenDBRefusesWrongSessions(t *testing.T) {
	reachable(t, MySQL)
	reachable(t, Postgres)
	iso := "tx_isolation" // MariaDB 10.11; MySQL 8 knows only transaction_isolation
	probe := mysqlHandle(t, func(c *gomysql.Config) {})
	if _, err := probe.ExecContext(ctxOpen(t), "SELECT @@session.tx_isolation"); err != nil {
		iso = "transaction_isolation"
	}
	ro := strings.Replace(iso, "isolation", "read_only", 1)
	cases := []struct {
		name string
		db   *sql.DB
		d    Dialect
		want string
	}{
		{"mysql autocommit=0", mysqlHandle(t, func(c *gomysql.Config) {
			c.ClientFoundRows = true
			c.Params = map[string]string{"autocommit": "0"}
		}), MySQL, "autocommit=0"},
		{"mysql without clientFoundRows", mysqlHandle(t, func(c *gomysql.Config) {}), MySQL, "clientFoundRows"},
		{"mysql read uncommitted", mysqlHandle(t, func(c *gomysql.Config) {
			c.ClientFoundRows = true
			c.Params = map[string]string{iso: "'READ-UNCOMMITTED'"}
		}), MySQL, "READ-UNCOMMITTED"},
		{"mysql read-only session", mysqlHandle(t, func(c *gomysql.Config) {
			c.ClientFoundRows = true
			c.Params = map[string]string{ro: "1"}
		}), MySQL, "read-only"},
		{"postgres read-only default", pgHandle(t, map[string]string{"default_transaction_read_only": "on"}), Postgres, "read-only"},
		{"postgres read-only through options", pgHandle(t, map[string]string{"options": "-c default_transaction_read_only=on"}), Postgres, "read-only"},
		{"postgres serializable default", pgHandle(t, map[string]string{"default_transaction_isolation": "serializable"}), Postgres, "serializable"},
		{"postgres repeatable read default", pgHandle(t, map[string]string{"default_transaction_isolation": "repeatable read"}), Postgres, "repeatable read"},
		{"postgres synchronous_commit off", pgHandle(t, map[string]string{"synchronous_commit": "off"}), Postgres, "synchronous_commit"},
	}
	for _, tc := range cases {
		_, err := testOpenDB(tc.db, tc.d, WithPrefix(testdb.Prefix()))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrInvalid naming %s", tc.name, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	// Handles set up as fence needs pass, and so do the defaults of a
	// plain pgx handle.
	for _, tc := range []struct {
		name string
		db   *sql.DB
		d    Dialect
	}{
		{"mysql with clientFoundRows", mysqlHandle(t, func(c *gomysql.Config) { c.ClientFoundRows = true }), MySQL},
		{"mysql read committed", mysqlHandle(t, func(c *gomysql.Config) {
			c.ClientFoundRows = true
			c.Params = map[string]string{iso: "'READ-COMMITTED'"}
		}), MySQL},
		{"postgres plain", pgHandle(t, nil), Postgres},
		{"postgres synchronous_commit local", pgHandle(t, map[string]string{"synchronous_commit": "local"}), Postgres},
	} {
		if _, err := testOpenDB(tc.db, tc.d, WithPrefix(testdb.Prefix())); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// The pgx-native path checks the pool as OpenDB checks a handle.
func TestOpenPoolRefusesWrongSessions(t *testing.T) {
	dsn := reachable(t, Postgres)
	for params, want := range map[string]error{
		"":                                 nil,
		"default_transaction_read_only=on": ErrInvalid,
		"default_transaction_isolation=serializable": ErrInvalid,
		"synchronous_commit=off":                     ErrInvalid,
	} {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if k, v, ok := strings.Cut(params, "="); ok {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
		pool, err := pgxpool.NewWithConfig(ctxOpen(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = testOpenPool(pool, WithPrefix(testdb.Prefix()))
		pool.Close()
		if !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("%q: %v, want %v", params, err, want)
		}
	}
}

// SQLite handles the caller opened: no journal, or a file that does not
// sync every commit, are refused; the driver's defaults pass.
func TestOpenDBRefusesWrongSQLite(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct {
		pragmas string
		want    string
	}{
		{"_pragma=journal_mode(OFF)", "journal_mode is OFF"},
		{"_pragma=journal_mode(MEMORY)", "MEMORY"},
		{"_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)", "synchronous is 1"},
		{"_pragma=synchronous(OFF)", "synchronous is 0"},
		{"", ""},
		{"_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)", ""},
	} {
		db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, fmt.Sprintf("h%d.db", i))+"?"+tc.pragmas)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		_, err = testOpenDB(db, SQLite)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.pragmas, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want ErrInvalid naming %q", tc.pragmas, err, tc.want)
		}
		db.Close()
	}
	mem, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	mem.SetMaxOpenConns(1)
	if _, err := testOpenDB(mem, SQLite); err != nil {
		t.Errorf("in-memory database (journal MEMORY is its only mode): %v", err)
	}
}

// A store opened from a DSN has a bounded pool: 60 goroutines acquiring at
// once queue for connections instead of opening 60, on the server as in
// db.Stats. Before, the pool was unbounded (60 acquires against
// max_connections=20 failed 36).
func TestOpenBoundsThePool(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Dialect
		opts []Option
		max  int
	}{
		{"postgres default", Postgres, nil, 10},
		{"postgres WithMaxOpenConns(3)", Postgres, []Option{WithMaxOpenConns(3)}, 3},
		{"mysql default", MySQL, nil, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := reachable(t, tc.d)
			app := testdb.Prefix() + "pool"
			if tc.d == Postgres {
				dsn = withParams(dsn, "application_name="+app)
			}
			ctx := ctxOpen(t)
			s, err := testOpen(ctx, dsn, append([]Option{WithPrefix(testdb.Prefix())}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			// Drop, then close: a cleanup runs after the test function's
			// deferred calls, so a deferred Close would come first.
			t.Cleanup(func() {
				if err := s.DropTables(context.Background()); err != nil {
					t.Errorf("drop tables: %v", err)
				}
				s.Close()
			})
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if got := s.DB().Stats().MaxOpenConnections; got != tc.max {
				t.Fatalf("MaxOpenConnections %d, want %d", got, tc.max)
			}
			var peak, serverPeak atomic.Int64
			stop := make(chan struct{})
			var sampler sync.WaitGroup
			sampler.Go(func() {
				// The server's own count, on a connection outside the pool.
				var mon *sql.DB
				if tc.d == Postgres {
					mon = pgHandle(t, nil)
				}
				for {
					peak.Store(max(peak.Load(), int64(s.DB().Stats().OpenConnections)))
					if mon != nil {
						var n int64
						if mon.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n) == nil {
							serverPeak.Store(max(serverPeak.Load(), n))
						}
					}
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
				}
			})
			var wg sync.WaitGroup
			var failed atomic.Int64
			var first atomic.Value
			for i := range 60 {
				wg.Go(func() {
					for j := range 5 {
						l, err := s.Acquire(ctx, fmt.Sprintf("pool-%d-%d", i, j), 5*time.Second)
						if err == nil {
							err = s.Release(ctx, l.Token)
						}
						if err != nil {
							failed.Add(1)
							first.CompareAndSwap(nil, err)
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			sampler.Wait()
			if n := failed.Load(); n > 0 {
				t.Errorf("%d of 300 acquire/release pairs failed; first: %v", n, first.Load())
			}
			st := s.DB().Stats()
			t.Logf("peak open connections %d (pg_stat_activity: %d, PostgreSQL only), waits for a connection %d", peak.Load(), serverPeak.Load(), st.WaitCount)
			if peak.Load() > int64(tc.max) || serverPeak.Load() > int64(tc.max) {
				t.Errorf("pool opened %d connections (server saw %d), bound %d", peak.Load(), serverPeak.Load(), tc.max)
			}
			if st.WaitCount == 0 {
				t.Errorf("no goroutine waited for a connection: the bound was never reached, the test proves nothing")
			}
		})
	}
	if _, err := testOpen(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "x.db"), WithMaxOpenConns(0)); !errors.Is(err, ErrInvalid) {
		t.Errorf("WithMaxOpenConns(0): %v", err)
	}
}
