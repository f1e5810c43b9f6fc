package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/mysql"
)

// The Galera suites run against a MariaDB Galera cluster of their own
// (clusters/galera/galera.sh start), given as FENCE_TEST_GALERA: its node
// DSNs, comma-separated. Without it they skip, also under
// FENCE_REQUIRE_DBS=1 (the shared servers are no cluster); with it an
// unreachable node fails them there.

type cluster struct {
	dsns []string
	dbs  []*sql.DB
}

func galeraCluster(t *testing.T) *cluster {
	t.Helper()
	dsns := testdb.GaleraDSNs()
	if len(dsns) == 0 {
		t.Skip("SKIP galera suite: set FENCE_TEST_GALERA to the node DSNs of a Galera cluster (clusters/galera/galera.sh start; galera.sh dsns)")
	}
	if len(dsns) < 2 {
		t.Fatalf("FENCE_TEST_GALERA lists %d node DSN(s); the Galera suites need at least 2", len(dsns))
	}
	c := &cluster{dsns: dsns}
	for _, dsn := range dsns {
		db, err := mysql.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err != nil {
			testdb.Unreachable(t, "galera", "FENCE_TEST_GALERA", err)
		}
		c.dbs = append(c.dbs, db)
	}
	return c
}

// openGaleraStore is the one place the Galera tests open a store.
func openGaleraStore(t testing.TB, dsn, prefix string) *fence.Store {
	t.Helper()
	s, err := fencedsn.Open(context.Background(), dsn, fence.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxG(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustExec(t testing.TB, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(ctxG(t), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// syncRead runs fn on a connection of db that waits until the node has
// applied every write the cluster committed before the read began
// (wsrep_sync_wait=1): the test's view of the cluster, not of a lagging node.
func syncRead(t testing.TB, db *sql.DB, fn func(c *sql.Conn) error) {
	t.Helper()
	ctx := ctxG(t)
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustExec(t, c, "SET SESSION wsrep_sync_wait = 1")
	defer c.ExecContext(context.Background(), "SET SESSION wsrep_sync_wait = 0")
	if err := fn(c); err != nil {
		t.Fatal(err)
	}
}

// lagApplier makes the node of dsn apply the cluster's writes late until
// release is called. A session there that does not replicate
// (wsrep_on=OFF) locks a row, and another node then writes that row: the
// node's applier waits for the lock (Galera brute-force aborts only
// replicating transactions), and with one applier thread
// (wsrep_slave_threads=1, as galera.sh configures) every later write set
// waits behind it; local transactions that reach COMMIT wait too, for the
// cluster's commit order. A slow applier under load does the same.
func lagApplier(t testing.TB, dsn string, other *sql.DB, lagTable string) (release func()) {
	t.Helper()
	ctx := ctxG(t)
	// A handle of its own: the session's wsrep_on=OFF must never go back to
	// a pool that fence writes through.
	ldb, err := mysql.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ldb.SetMaxOpenConns(1)
	var threads int
	if err := ldb.QueryRowContext(ctx, "SELECT @@wsrep_slave_threads").Scan(&threads); err != nil {
		t.Fatal(err)
	}
	if threads != 1 {
		ldb.Close()
		t.Fatalf("the lagging node runs %d applier threads; the lag injection needs wsrep_slave_threads=1 (galera.sh sets it)", threads)
	}
	conn, err := ldb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, "SET SESSION wsrep_on = OFF")
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT n FROM "+lagTable+" WHERE id = 1 FOR UPDATE").Scan(&n); err != nil {
		t.Fatal(err)
	}
	mustExec(t, other, "UPDATE "+lagTable+" SET n = n + 1 WHERE id = 1")
	var once bool
	release = func() {
		if once {
			return
		}
		once = true
		tx.Rollback()
		conn.Close()
		ldb.Close()
	}
	t.Cleanup(release)
	return release
}

// waitCommitting waits until a statement on db (node 1) waits for the
// cluster's commit order, or until done has a result: the stale owner's
// write got past its guard on the lagging node.
func waitCommitting(t testing.TB, db *sql.DB, target string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if len(done) > 0 {
			return
		}
		var n int
		err := db.QueryRowContext(ctxG(t), `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID() AND (INFO = 'COMMIT' OR (INFO LIKE ? AND INFO LIKE 'UPDATE%'))`,
			"%"+target+"%").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			// Past the statement's own work, waiting for the applier.
			time.Sleep(200 * time.Millisecond)
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the stale owner's write never reached its commit")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// staleWriter is one way for A, the owner that lost its lease, to write
// through the lagging node 1.
type staleWriter struct {
	name string
	// stale: the guard lets A's write commit after B's takeover (the
	// issue's table); the Galera-safe guards must refuse it.
	stale bool
	// callerCommits: the COMMIT is the caller's, so its certification
	// failure reaches the caller as the server's error (1213), not as
	// ErrLost; nothing committed either way.
	callerCommits bool
	write         func(ctx context.Context, s *fence.Store, db *sql.DB, tok fence.Token, target string, id int) error
}

// nowMs is the database clock in milliseconds, for the guards the test
// spells out itself (the driver's own live in queries/*.sql).
const nowMs = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"

func staleWriters(prefix string) []staleWriter {
	leases := prefix + "leases"
	cond := " WHERE lease_name = ? AND owner_token = ? AND fence_token = ? AND leased_until_ms > " + nowMs
	inTx := func(ctx context.Context, db *sql.DB, guard func(tx *sql.Tx) error, target string, id int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := guard(tx); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE "+target+" SET v = 'A' WHERE id = ?", id); err != nil {
			return err
		}
		return tx.Commit()
	}
	return []staleWriter{
		{name: "predicate", stale: true, write: func(ctx context.Context, s *fence.Store, db *sql.DB, tok fence.Token, target string, id int) error {
			// Today's single statement: UPDATE … AND EXISTS (… LOCK IN SHARE MODE).
			q, args, err := s.Fenced(tok, "UPDATE "+target+" SET v = 'A' WHERE id = ? AND {{fence}}", id)
			if err != nil {
				return err
			}
			res, err := db.ExecContext(ctx, q, args...)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return errors.New("refused: no row")
			}
			return nil
		}},
		{name: "share-lock-tx", stale: true, write: func(ctx context.Context, s *fence.Store, db *sql.DB, tok fence.Token, target string, id int) error {
			return inTx(ctx, db, func(tx *sql.Tx) error {
				var n int
				if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+leases+cond+" LOCK IN SHARE MODE", tok.Lease, tok.Owner, tok.Fence).Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					return errors.New("refused: not held")
				}
				return nil
			}, target, id)
		}},
		{name: "no-op-lease-update", stale: true, write: func(ctx context.Context, s *fence.Store, db *sql.DB, tok fence.Token, target string, id int) error {
			return inTx(ctx, db, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, "UPDATE "+leases+" SET fence_token = fence_token"+cond, tok.Lease, tok.Owner, tok.Fence)
				if err != nil {
					return err
				}
				if n, _ := res.RowsAffected(); n == 0 {
					return errors.New("refused: not held")
				}
				return nil
			}, target, id)
		}},
		{name: "fence.Exec", write: func(ctx context.Context, s *fence.Store, db *sql.DB, tok fence.Token, target string, id int) error {
			_, err := s.Exec(ctx, tok, "UPDATE "+target+" SET v = 'A' WHERE id = ? AND {{fence}}", id)
			return err
		}},
		{name: "fence.InTx", write: func(ctx context.Context, s *fence.Store, db *sql.DB, tok fence.Token, target string, id int) error {
			return s.InTx(ctx, tok, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "UPDATE "+target+" SET v = 'A' WHERE id = ?", id)
				return err
			})
		}},
		{name: "fence.ExecIn-tx", callerCommits: true, write: func(ctx context.Context, s *fence.Store, db *sql.DB, tok fence.Token, target string, id int) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := s.ExecIn(ctx, tx, tok, "UPDATE "+target+" SET v = 'A' WHERE id = ? AND {{fence}}", id); err != nil {
				return err
			}
			return tx.Commit()
		}},
	}
}

// TestGaleraStaleWrite is the table: A holds a lease through node
// 1, node 1's applier lags, B revokes and takes the lease over through node
// 2, and A, which node 1 still shows as the holder, writes through node 1.
// With the share-lock guards A's write commits after B's takeover; with the
// guard that writes the lease row (what fence does on Galera) it is refused
// and nothing of it commits.
func TestGaleraStaleWrite(t *testing.T) {
	c := galeraCluster(t)
	prefix := testdb.Prefix()
	s1 := openGaleraStore(t, c.dsns[0], prefix)
	s2 := openGaleraStore(t, c.dsns[1], prefix)
	ctx := ctxG(t)
	if _, err := s1.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	target, lag := prefix+"target", prefix+"lag"
	t.Cleanup(func() {
		s1.DropTables(context.Background())
		for _, tbl := range []string{target, lag} {
			c.dbs[0].ExecContext(context.Background(), "DROP TABLE IF EXISTS "+tbl)
		}
	})
	mustExec(t, c.dbs[0], "CREATE TABLE "+target+" (id INT PRIMARY KEY, v VARCHAR(32) NOT NULL) ENGINE=InnoDB")
	mustExec(t, c.dbs[0], "CREATE TABLE "+lag+" (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB")
	mustExec(t, c.dbs[0], "INSERT INTO "+lag+" VALUES (1, 0)")

	for i, w := range staleWriters(prefix) {
		t.Run(w.name, func(t *testing.T) {
			ctx := ctxG(t)
			id, name := i+1, "stale-"+w.name
			mustExec(t, c.dbs[0], "INSERT INTO "+target+" VALUES (?, 'init')", id)
			a, err := s1.Acquire(ctx, name, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// Node 2 has A's acquisition, node 1 everything before the lag.
			for _, db := range c.dbs[:2] {
				syncRead(t, db, func(c *sql.Conn) error {
					var n int
					return c.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+prefix+"leases").Scan(&n)
				})
			}

			release := lagApplier(t, c.dsns[0], c.dbs[1], lag)
			if _, err := s2.Revoke(ctx, name); err != nil {
				t.Fatal(err)
			}
			b, err := s2.Acquire(ctx, name, time.Minute)
			if err != nil {
				t.Fatalf("B's takeover through node 2: %v", err)
			}
			if held, err := s1.IsHeld(ctx, a.Token); err != nil || !held {
				t.Fatalf("node 1 already shows the takeover (held=%v, err=%v): no apply lag, the case proves nothing", held, err)
			}

			done := make(chan error, 1)
			go func() { done <- w.write(ctx, s1, c.dbs[0], a.Token, target, id) }()
			waitCommitting(t, c.dbs[0], target, done)
			release()
			var werr error
			select {
			case werr = <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("A's write did not return within 60s of the lag's end")
			}

			var v string
			syncRead(t, c.dbs[1], func(c *sql.Conn) error {
				return c.QueryRowContext(ctx, "SELECT v FROM "+target+" WHERE id = ?", id).Scan(&v)
			})
			stale := werr == nil && v == "A"
			t.Logf("A (fence %d) after B's takeover (fence %d): err=%v, row on node 2 = %q", a.Token.Fence, b.Token.Fence, werr, v)
			switch {
			case w.stale && !stale:
				t.Errorf("control: the %s guard refused A's stale write (err=%v, row %q); the issue measured it committing, so the lag injection or the cluster differs", w.name, werr, v)
			case !w.stale && stale:
				t.Errorf("%s: A's stale write committed after B's takeover", w.name)
			case !w.stale && v != "init":
				t.Errorf("%s: A's write returned %v but the row is %q: part of it committed", w.name, werr, v)
			case !w.stale && w.callerCommits && werr == nil:
				t.Errorf("%s: the caller's COMMIT succeeded", w.name)
			case !w.stale && !w.callerCommits && !errors.Is(werr, fence.ErrLost):
				t.Errorf("%s: want ErrLost, got %v", w.name, werr)
			}
			// B's takeover never waited and B writes as the holder.
			if _, err := s2.Exec(ctx, b.Token, "UPDATE "+target+" SET v = 'B' WHERE id = ? AND {{fence}}", id); err != nil {
				t.Errorf("B's fenced write through node 2: %v", err)
			}
		})
	}
}

// TestGaleraLeaseOps runs the lease operations through different nodes:
// each writes the lease row, so the cluster orders them, and a node that
// has not yet applied a takeover still cannot hand out its fence again.
func TestGaleraLeaseOps(t *testing.T) {
	c := galeraCluster(t)
	prefix := testdb.Prefix()
	ctx := ctxG(t)
	stores := make([]*fence.Store, len(c.dsns))
	for i, dsn := range c.dsns {
		stores[i] = openGaleraStore(t, dsn, prefix)
	}
	if _, err := stores[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stores[0].DropTables(context.Background()) })
	var last int64
	for round := range 6 {
		s := stores[round%len(stores)]
		other := stores[(round+1)%len(stores)]
		l, err := s.Acquire(ctx, "ops", time.Minute)
		for errors.Is(err, fence.ErrHeld) || (err != nil && fence.IsRetryable(err)) {
			// The node has not applied the last release yet, or
			// certification refused the acquire: both say try again.
			time.Sleep(5 * time.Millisecond)
			l, err = s.Acquire(ctx, "ops", time.Minute)
		}
		if err != nil {
			t.Fatalf("round %d: acquire: %v", round, err)
		}
		if l.Token.Fence <= last {
			t.Fatalf("round %d: fence %d not above %d", round, l.Token.Fence, last)
		}
		last = l.Token.Fence
		if _, err := s.Renew(ctx, l.Token, time.Minute); err != nil {
			t.Fatalf("round %d: renew: %v", round, err)
		}
		// A fenced write through another node than the acquire's.
		var n int64
		for {
			n, err = other.Exec(ctx, l.Token, "UPDATE "+prefix+"leases SET holder = holder WHERE lease_name = 'ops' AND {{fence}}")
			if err == nil || !(errors.Is(err, fence.ErrLost) || fence.IsRetryable(err)) {
				break
			}
			// The other node has not applied the acquire yet.
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil || n != 1 {
			t.Fatalf("round %d: fenced write through another node: n=%d err=%v", round, n, err)
		}
		if round%2 == 0 {
			if err := s.Release(ctx, l.Token); err != nil {
				t.Fatalf("round %d: release: %v", round, err)
			}
		} else {
			f, err := other.Revoke(ctx, "ops")
			if err != nil || f <= last {
				t.Fatalf("round %d: revoke through another node: fence %d err %v", round, f, err)
			}
			last = f
		}
	}
}

// TestGaleraDetect: a Galera node is detected when the store opens, and its
// fenced writes write the lease row (guard_seq moves).
func TestGaleraDetect(t *testing.T) {
	c := galeraCluster(t)
	prefix := testdb.Prefix()
	ctx := ctxG(t)
	s := openGaleraStore(t, c.dsns[0], prefix)
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.DropTables(context.Background()) })
	l, err := s.Acquire(ctx, "detect", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Exec(ctx, l.Token, "UPDATE "+prefix+"leases SET holder = holder WHERE lease_name = 'detect' AND {{fence}}"); err != nil {
			t.Fatal(err)
		}
	}
	var seq int64
	if err := s.DB().QueryRowContext(ctx, "SELECT guard_seq FROM "+prefix+"leases WHERE lease_name = 'detect'").Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if seq != 3 {
		t.Fatalf("guard_seq = %d after 3 fenced writes on a Galera node, want 3", seq)
	}
}

// TestGaleraRetryAutocommitRefused: a Galera session that re-runs failed
// autocommit statements is refused when the store opens, naming the
// setting; with wsrep_retry_autocommit=0 in the DSN it opens.
func TestGaleraRetryAutocommitRefused(t *testing.T) {
	c := galeraCluster(t)
	cfg, err := gomysql.ParseDSN("root@tcp(" + strings.TrimSuffix(strings.TrimPrefix(c.dsns[0], "mysql://root@"), "/fence") + ")/fence")
	if err != nil || !strings.HasPrefix(c.dsns[0], "mysql://root@") || !strings.HasSuffix(c.dsns[0], "/fence") {
		t.Skipf("SKIP: the refusal case builds its own handle from a DSN of galera.sh's form (mysql://root@host:port/fence), got %q", c.dsns[0])
	}
	cfg.ClientFoundRows = true
	cfg.Params = map[string]string{"wsrep_retry_autocommit": "1"}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	_, err = fencedsn.OpenDB(context.Background(), db, fence.MySQL, fence.WithPrefix(testdb.Prefix()))
	if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "wsrep_retry_autocommit") {
		t.Fatalf("OpenDB on a session with wsrep_retry_autocommit=1: want ErrInvalid naming it, got %v", err)
	}
	s, err := fencedsn.Open(context.Background(), c.dsns[0]+"?wsrep_retry_autocommit=0")
	if err != nil {
		t.Fatalf("Open with wsrep_retry_autocommit=0: %v", err)
	}
	s.Close()
}

// TestGaleraOpenSetsRetryAutocommit: on a node whose server default is
// MariaDB's (wsrep_retry_autocommit=1), a store opened from a DSN without
// the parameter opens, and its sessions have 0 (Open sets it); the
// caller's own pool on the same node is refused (TestGaleraRetryAutocommitRefused).
func TestGaleraOpenSetsRetryAutocommit(t *testing.T) {
	c := galeraCluster(t)
	ctx := ctxG(t)
	mustExec(t, c.dbs[0], "SET GLOBAL wsrep_retry_autocommit = 1")
	t.Cleanup(func() { c.dbs[0].ExecContext(context.Background(), "SET GLOBAL wsrep_retry_autocommit = 0") })
	s, err := fencedsn.Open(ctx, c.dsns[0], fence.WithPrefix(testdb.Prefix()))
	if err != nil {
		t.Fatalf("Open without wsrep_retry_autocommit in the DSN, server default 1: %v", err)
	}
	defer s.Close()
	s.DB().SetMaxIdleConns(0)
	for i := range 3 {
		var v int64
		if err := s.DB().QueryRowContext(ctx, "SELECT @@session.wsrep_retry_autocommit").Scan(&v); err != nil || v != 0 {
			t.Fatalf("connection %d of the store's handle: wsrep_retry_autocommit=%d, %v; want 0", i+1, v, err)
		}
	}
}
