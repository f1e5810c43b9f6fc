package fence_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fencepgx"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/mysql"
	"github.com/fencekit/fence/postgres"
)

// ErrAmbiguous means "the statement may have reached the server". A call
// whose context had already ended sends nothing: its error is definite, and
// wraps the context's cause, so a worker resuming from a pause whose job
// context the runner cancelled with ErrLost hears ErrLost. (Before, every
// one of these was "outcome unknown".)
func TestEndedContextIsDefinite(t *testing.T) {
	teststore.EachOf(t, teststore.WithPgx(), func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		ctx := context.Background()
		tok, err := s.Acquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		id, err := s.StartRun(ctx, tok.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		table := testdb.WorkTable(t, s.Prefix(), func(ctx context.Context, q string) error { _, err := exec(ctx, s, q); return err })
		if _, err := exec(ctx, s, "INSERT INTO "+table+" (id, v) VALUES (1, 0)"); err != nil {
			t.Fatal(err)
		}
		lostCause := &fence.LostError{Lease: "job", Fence: tok.Token.Fence, Reason: fence.LostSuperseded, Op: "renew"}
		dead, cancel := context.WithCancelCause(ctx)
		cancel(lostCause)
		// The runner's cause at the renew deadline, after a renewal whose
		// outcome was unknown: the calls refused on it are still definite.
		unproven, cancel3 := context.WithCancelCause(ctx)
		cancel3(&fence.UnprovenError{Token: tok.Token, Deadline: time.Second,
			Last: &fence.AmbiguousError{Op: "renew", Lease: "job", Err: context.DeadlineExceeded}})
		expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel2()
		calls := map[string]func(ctx context.Context) error{
			"acquire": func(ctx context.Context) error { _, err := s.Acquire(ctx, "other", time.Minute); return err },
			"renew":   func(ctx context.Context) error { _, err := s.Renew(ctx, tok.Token, time.Minute); return err },
			"renew batch": func(ctx context.Context) error {
				_, err := s.RenewBatch(ctx, []fence.Token{tok.Token}, time.Minute)
				return err
			},
			"release": func(ctx context.Context) error { return s.Release(ctx, tok.Token) },
			"revoke":  func(ctx context.Context) error { _, err := s.Revoke(ctx, "job"); return err },
			"write": func(ctx context.Context) error {
				_, err := s.Exec(ctx, tok.Token, s.Rebind("UPDATE "+table+" SET v = v + 1 WHERE id = ? AND {{fence}}"), 1)
				return err
			},
			"start run":  func(ctx context.Context) error { _, err := s.StartRun(ctx, tok.Token, nil); return err },
			"finish run": func(ctx context.Context) error { return s.FinishRun(ctx, tok.Token, id, fence.Completion{}) },
			"mark lost":  func(ctx context.Context) error { return s.MarkRunLost(ctx, id, tok.Token.Fence, "x") },
			"sweep":      func(ctx context.Context) error { _, err := s.SweepRuns(ctx); return err },
		}
		write := s.Rebind("UPDATE " + table + " SET v = v + 1 WHERE id = ? AND {{fence}}")
		calls["exec with"] = func(ctx context.Context) error {
			_, err := s.ExecWith(ctx, tok.Token, func(ctx context.Context, q string, args []any) (int64, error) {
				return exec(ctx, s, q, args...)
			}, write, 1)
			return err
		}
		if d, ok := s.Driver().(*postgres.Driver); ok && d.Pool() != nil {
			p := d.Pool()
			calls["fencepgx exec"] = func(ctx context.Context) error {
				_, err := fencepgx.Exec(ctx, s, p, tok.Token, write, 1)
				return err
			}
			calls["fencepgx in tx"] = func(ctx context.Context) error {
				return fencepgx.InTx(ctx, s, p, tok.Token, func(pgx.Tx) error { return nil })
			}
			calls["fencepgx in tx (begin)"] = func(ctx context.Context) error {
				c, err := p.Acquire(context.Background())
				if err != nil {
					return err
				}
				defer c.Release()
				// A *pgx.Conn wrapped so that InTx begins it with Begin,
				// then checks: its other path.
				return fencepgx.InTx(ctx, s, beginOnly{c}, tok.Token, func(pgx.Tx) error { return nil })
			}
			calls["fencepgx check tx"] = func(ctx context.Context) error {
				tx, err := p.Begin(context.Background())
				if err != nil {
					return err
				}
				defer tx.Rollback(context.Background())
				return fencepgx.CheckTx(ctx, s, tx, tok.Token)
			}
		} else {
			calls["exec in"] = func(ctx context.Context) error {
				_, err := s.ExecIn(ctx, s.DB(), tok.Token, write, 1)
				return err
			}
			calls["in tx"] = func(ctx context.Context) error {
				return s.InTx(ctx, tok.Token, func(*sql.Tx) error { return nil })
			}
			calls["check tx"] = func(ctx context.Context) error {
				tx, err := s.DB().BeginTx(context.Background(), nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				return s.CheckTx(ctx, tx, tok.Token)
			}
		}
		for name, call := range calls {
			err := call(dead)
			if err == nil || errors.Is(err, fence.ErrAmbiguous) || !errors.Is(err, fence.ErrLost) || !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a context cancelled (cause ErrLost) before the call: %v; want a definite error wrapping ErrLost and context.Canceled", name, err)
			}
			err = call(unproven)
			if err == nil || errors.Is(err, fence.ErrAmbiguous) || !errors.Is(err, fence.ErrUnproven) || !errors.Is(err, fence.ErrLost) {
				t.Errorf("%s with a context cancelled at the renew deadline after an unknown renewal: %v; want a definite error wrapping ErrUnproven", name, err)
			}
			err = call(expired)
			if err == nil || errors.Is(err, fence.ErrAmbiguous) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s with a context expired before the call: %v; want a definite error wrapping context.DeadlineExceeded", name, err)
			}
		}
		// Nothing was written by any of them.
		if ok, err := s.IsHeld(ctx, tok.Token); err != nil || !ok {
			t.Fatalf("the holder lost its lease to calls that were never sent: %v %v", ok, err)
		}
		if r, err := s.GetRun(ctx, id); err != nil || r.Status != fence.RunRunning {
			t.Fatalf("run after calls that were never sent: %+v %v", r, err)
		}
	})
}

// A statement the server refuses (a syntax error) and one whose arguments
// the client refuses never committed: definite, on every database.
func TestRefusedStatementIsDefinite(t *testing.T) {
	teststore.EachOf(t, teststore.WithPgx(), func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		ctx := context.Background()
		tok, err := s.Acquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		table := testdb.WorkTable(t, s.Prefix(), func(ctx context.Context, q string) error { _, err := exec(ctx, s, q); return err })
		_, err = s.Exec(ctx, tok.Token, "UPDATE "+table+" SET v = WHERE {{fence}}")
		if err == nil || errors.Is(err, fence.ErrAmbiguous) {
			t.Errorf("syntax error: %v; want a definite error", err)
		}
		// One argument short.
		_, err = s.Exec(ctx, tok.Token, s.Rebind("UPDATE "+table+" SET v = ? WHERE id = ? AND {{fence}}"), 1)
		if err == nil || errors.Is(err, fence.ErrAmbiguous) {
			t.Errorf("an argument short: %v; want a definite error", err)
		}
		// An argument database/sql or pgx cannot convert.
		_, err = s.Exec(ctx, tok.Token, s.Rebind("UPDATE "+table+" SET v = ? WHERE id = 1 AND {{fence}}"), make(chan int))
		if err == nil || errors.Is(err, fence.ErrAmbiguous) {
			t.Errorf("an argument that cannot be sent: %v; want a definite error", err)
		}
	})
}

// A connection that never opened sent nothing: refused, an unknown host, and
// on PostgreSQL a role past its CONNECTION LIMIT (SQLSTATE 53300, a FATAL
// answer to the startup, which was "outcome unknown").
func TestNeverConnectedIsDefinite(t *testing.T) {
	closed := closedPort(t)
	for _, db := range []struct {
		name string
		dsn  string
		open func(string) (*sql.DB, error)
	}{
		{"postgres", testdb.PostgresDSN(), postgres.Open},
		{"mysql", testdb.MySQLDSN(), mysql.Open},
	} {
		for _, host := range []string{closed, "fence-test-no-such-host.invalid:5432"} {
			t.Run(db.name+"/"+host, func(t *testing.T) {
				t.Parallel()
				u, err := url.Parse(db.dsn)
				if err != nil {
					t.Fatal(err)
				}
				u.Host = host
				// OpenDB checks the handle's settings, so it is the first
				// call to meet the dead address.
				_, err = openUnpinged(t, u.String(), db.open)
				if err == nil || errors.Is(err, fence.ErrAmbiguous) || !errors.Is(err, fence.ErrUnavailable) {
					t.Fatalf("OpenDB over %s: %v; want a definite ErrUnavailable", host, err)
				}
			})
		}
		// The same for lease calls: a store opened through a gate that is
		// then shut, so that every later connection is refused.
		t.Run(db.name+"/gate-shut", func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(db.dsn)
			if err != nil {
				t.Fatal(err)
			}
			g := openGate(t, u.Host)
			u.Host = g.addr
			s, err := openUnpinged(t, u.String(), db.open)
			if err != nil {
				t.Fatal(err)
			}
			s.DB().SetMaxIdleConns(0)
			g.shut()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err = s.Acquire(ctx, "job", time.Minute)
			if err == nil || errors.Is(err, fence.ErrAmbiguous) {
				t.Fatalf("acquire over a refused connection: %v; want a definite error", err)
			}
			if _, err := s.Revoke(ctx, "job"); err == nil || errors.Is(err, fence.ErrAmbiguous) {
				t.Fatalf("revoke over a refused connection: %v; want a definite error", err)
			}
		})
	}
	t.Run("postgres/connection-limit", func(t *testing.T) {
		t.Parallel()
		admin := teststore.Postgres.Open(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		role := "fence_limit_" + randHex(t)
		if _, err := admin.DB().ExecContext(ctx, "CREATE ROLE "+role+" LOGIN CONNECTION LIMIT 1"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// The role's own connections must be gone before DROP ROLE.
			admin.DB().ExecContext(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
			for i := 0; i < 100; i++ {
				if _, err := admin.DB().ExecContext(ctx, "DROP ROLE IF EXISTS "+role); err == nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Errorf("could not drop role %s", role)
		})
		u, err := url.Parse(testdb.PostgresDSN())
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		first, err := openUnpinged(t, u.String(), postgres.Open)
		if err != nil {
			t.Fatal(err)
		}
		if err := first.DB().PingContext(ctx); err != nil {
			t.Fatal(err)
		}
		first.DB().SetMaxOpenConns(1)
		// The second store's first connection is past the limit: OpenDB,
		// which checks the connection's settings, meets it.
		_, err = openUnpinged(t, u.String(), postgres.Open)
		if err == nil || !strings.Contains(err.Error(), "53300") && !strings.Contains(err.Error(), "too many connections") {
			t.Fatalf("acquire past the role's connection limit: %v; want SQLSTATE 53300", err)
		}
		if errors.Is(err, fence.ErrAmbiguous) {
			t.Fatalf("acquire past the role's connection limit: %v; want a definite error", err)
		}
	})
}

// openUnpinged is a store over a handle that was never pinged (fence.Open
// would refuse an unreachable database before any call).
func openUnpinged(t *testing.T, dsn string, open func(string) (*sql.DB, error)) (*fence.Store, error) {
	t.Helper()
	h, err := open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	d, err := fencedsn.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return fencedsn.OpenDB(context.Background(), h, d.Dialect)
}

// gate forwards TCP connections to a database until shut; after that its
// port refuses connections and the ones it carried are cut.
type gate struct {
	addr string
	ln   net.Listener
	mu   sync.Mutex
	open []net.Conn
}

func openGate(t *testing.T, target string) *gate {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{addr: ln.Addr().String(), ln: ln}
	t.Cleanup(g.shut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			g.mu.Lock()
			g.open = append(g.open, c, d)
			g.mu.Unlock()
			go func() { io.Copy(d, c); d.Close() }()
			go func() { io.Copy(c, d); c.Close() }()
		}
	}()
	return g
}

func (g *gate) shut() {
	g.ln.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.open {
		c.Close()
	}
	g.open = nil
}

// closedPort is host:port of a port nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func randHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// exec runs the test's own SQL on the store's handle, database/sql or pgx.
func exec(ctx context.Context, s *fence.Store, q string, args ...any) (int64, error) {
	if d, ok := s.Driver().(*postgres.Driver); ok && d.Pool() != nil {
		p := d.Pool()
		tag, err := p.Exec(ctx, q, args...)
		return tag.RowsAffected(), err
	}
	res, err := s.DB().ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// FinishRun retried with the same outcome by a token that still holds the
// lease (a retry after an answer was lost) is success; a different outcome
// is still refused. Before, the retry was ErrLost (reason "unknown") while
// IsHeld said true.
func TestFinishRunIsIdempotent(t *testing.T) {
	teststore.EachOf(t, teststore.WithPgx(), func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		ctx := context.Background()
		tok, err := s.Acquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		code := 3
		for _, o := range []fence.Completion{
			{Result: map[string]int{"n": 1}},
			{Err: errors.New("disk full"), ExitCode: &code},
			{},
		} {
			id, err := s.StartRun(ctx, tok.Token, map[string]string{"phase": "start"})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				if err := s.FinishRun(ctx, tok.Token, id, o); err != nil {
					t.Fatalf("finish %d of run %d with %+v: %v", i+1, id, o, err)
				}
			}
			other := fence.Completion{Err: errors.New("another outcome")}
			if o.Err != nil {
				other = fence.Completion{}
			}
			if err := s.FinishRun(ctx, tok.Token, id, other); !errors.Is(err, fence.ErrLost) {
				t.Fatalf("a different outcome for a finished run: %v; want refused", err)
			}
		}
		if ok, err := s.IsHeld(ctx, tok.Token); !ok || err != nil {
			t.Fatalf("holder after its completions: %v %v", ok, err)
		}
	})
}

// A transaction whose context ends before its COMMIT was sent did not
// commit: InTx's error is definite, wraps the context's cause and names the
// lease, and the transaction's write is gone. Before, database/sql's
// Tx.Commit returned the bare context error (it checks the context before
// asking the driver, and its watcher rolls the transaction back) and InTx
// reported it as ErrAmbiguous, with no lease in the message. The same for
// fencepgx.InTx on pgx's own pool.
func TestTxEndedBeforeCommitIsDefinite(t *testing.T) {
	teststore.EachOf(t, teststore.WithPgx(), func(t *testing.T, b teststore.Backend) {
		s := b.Open(t)
		ctx := context.Background()
		l, err := s.Acquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		tok := l.Token
		table := testdb.WorkTable(t, s.Prefix(), func(ctx context.Context, q string) error { _, err := exec(ctx, s, q); return err })
		if _, err := exec(ctx, s, "INSERT INTO "+table+" (id, v) VALUES (1, 0)"); err != nil {
			t.Fatal(err)
		}
		update := s.Rebind("UPDATE " + table + " SET v = v + 1 WHERE id = ?")
		// inTx runs the store's fenced transaction with a write, then end
		// (which ends ctx) before the commit.
		inTx := func(ctx context.Context, end func()) error {
			if d, ok := s.Driver().(*postgres.Driver); ok && d.Pool() != nil {
				return fencepgx.InTx(ctx, s, d.Pool(), tok, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, update, 1); err != nil {
						return err
					}
					end()
					return nil
				})
			}
			return s.InTx(ctx, tok, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, update, 1); err != nil {
					return err
				}
				end()
				return nil
			})
		}
		cause := &fence.LostError{Lease: "job", Fence: tok.Fence, Reason: fence.LostSuperseded, Op: "renew"}
		cctx, cancel := context.WithCancelCause(ctx)
		err = inTx(cctx, func() { cancel(cause) })
		if err == nil || errors.Is(err, fence.ErrAmbiguous) || !errors.Is(err, fence.ErrLost) ||
			!errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `"job"`) {
			t.Errorf("InTx cancelled (cause ErrLost) before its commit: %v; want a definite error naming the lease, wrapping ErrLost and context.Canceled", err)
		}
		// A deadline that passes while fn runs.
		dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer dcancel()
		err = inTx(dctx, func() { <-dctx.Done() })
		if err == nil || errors.Is(err, fence.ErrAmbiguous) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("InTx whose deadline passed before its commit: %v; want a definite error wrapping context.DeadlineExceeded", err)
		}
		// Neither committed: the row is as it was, and the lease is free
		// of the transactions' locks.
		if n, err := exec(ctx, s, "UPDATE "+table+" SET v = v WHERE id = 1 AND v = 0"); err != nil || n != 1 {
			t.Errorf("a transaction whose commit was never sent changed the row (%d rows still at 0): %v", n, err)
		}
		if _, err := s.Renew(ctx, tok, time.Minute); err != nil {
			t.Errorf("renew after the transactions: %v", err)
		}
	})
}

// beginOnly is a pgx connection that offers only Begin, so fencepgx.InTx
// begins and checks in two round trips.
type beginOnly struct {
	c interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	}
}

func (b beginOnly) Begin(ctx context.Context) (pgx.Tx, error) { return b.c.Begin(ctx) }
