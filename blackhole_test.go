package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fencepgx"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/postgres"
)

// holeProxy forwards TCP to a database until black-holed: from then on it
// drops every byte both ways, on open connections and new ones alike, and
// closes nothing, as a server that stopped answering (or a partition)
// does. A refused connection would be a different, easier case.
type holeProxy struct {
	ln    net.Listener
	up    string
	black atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newHoleProxy(t *testing.T, upstream string) *holeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holeProxy{ln: ln, up: upstream}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *holeProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		if p.black.Load() {
			go io.Copy(io.Discard, c)
			continue
		}
		u, err := net.Dial("tcp", p.up)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, u)
		p.mu.Unlock()
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

func (p *holeProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.black.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (p *holeProxy) hole() { p.black.Store(true) }

func (p *holeProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// signalObserver closes a channel when the n-th acquire attempt of the
// store has returned.
type signalObserver struct {
	n    int32
	seen atomic.Int32
	ch   chan struct{}
}

func (o *signalObserver) Observe(ctx context.Context, op fence.Op, _ string) (context.Context, func(fence.Event)) {
	return ctx, func(fence.Event) {
		if op == fence.OpAcquire && o.seen.Add(1) == o.n {
			close(o.ch)
		}
	}
}

// blackHoleMargin is what a call may take past its deadline when the
// server stops answering: the package doc promises the deadline plus half
// a second (a follow-up read's detached grace of 250 ms and the
// connection's teardown), and a loaded test machine gets as much again.
const blackHoleMargin = time.Second

// Every lease call and fenced write returns within its deadline plus a
// small margin when the server stops answering (a black hole, not a
// refused connection), before or in the middle of the call, on PostgreSQL
// (database/sql and pgx's pool) and MariaDB. Before, PostgreSQL's
// AcquireWait with a 1.2 s deadline returned after 6.2 s: its release
// watch's cleanup waited 5 s for an unlock on the dead connection.
func TestBlackHoleCallsKeepTheirDeadline(t *testing.T) {
	testdb.Long(t)
	const deadline = 1200 * time.Millisecond
	type env = holeEnv
	ops := []struct {
		name string
		// setup runs before the call with the network up; call runs
		// with ctx (deadline set) and may black-hole the proxy itself.
		setup func(t *testing.T, e *env) fence.Token
		call  func(ctx context.Context, e *env, tok fence.Token) error
		// holeFirst: black-hole before the call; otherwise call does.
		holeFirst bool
	}{
		{name: "acquire-wait", call: func(ctx context.Context, e *env, _ fence.Token) error {
			if _, err := e.direct.Acquire(context.Background(), "held", time.Minute); err != nil {
				return err
			}
			_, err := e.s.AcquireWait(ctx, "held", time.Minute)
			return err
		}},
		{name: "acquire", holeFirst: true, call: func(ctx context.Context, e *env, _ fence.Token) error {
			_, err := e.s.Acquire(ctx, "free", time.Minute)
			return err
		}},
		{name: "renew", holeFirst: true, setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			_, err := e.s.Renew(ctx, tok, time.Minute)
			return err
		}},
		{name: "release", holeFirst: true, setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			return e.s.Release(ctx, tok)
		}},
		{name: "exec", holeFirst: true, setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			_, err := e.s.Exec(ctx, tok, e.s.Rebind("UPDATE "+e.table+" SET v = v + 1 WHERE id = ? AND {{fence}}"), 1)
			return err
		}},
		{name: "exec-waiting", setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			// The write waits for a row lock the direct store holds; the
			// server stops answering during the wait.
			tx, err := e.direct.DB().BeginTx(context.Background(), nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.Exec(e.direct.Rebind("UPDATE "+e.table+" SET v = v WHERE id = ?"), 1); err != nil {
				return err
			}
			go func() {
				waitForLockWait(e)
				e.p.hole()
			}()
			_, err = e.s.Exec(ctx, tok, e.s.Rebind("UPDATE "+e.table+" SET v = v + 1 WHERE id = ? AND {{fence}}"), 1)
			return err
		}},
		{name: "intx", setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			// The server stops answering after the transaction's write,
			// before its COMMIT.
			plain := e.s.Rebind("UPDATE " + e.table + " SET v = v + 1 WHERE id = ?")
			if e.pool != nil {
				return fencepgx.InTx(ctx, e.s, e.pool, tok, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, plain, 1)
					e.p.hole()
					return err
				})
			}
			return e.s.InTx(ctx, tok, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, plain, 1)
				e.p.hole()
				return err
			})
		}},
		{name: "intx-fn-error", setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			// The server stops answering after the transaction's write,
			// and fn fails without another statement: the rollback.
			plain := e.s.Rebind("UPDATE " + e.table + " SET v = v + 1 WHERE id = ?")
			errFn := errors.New("fn failed")
			if e.pool != nil {
				return fencepgx.InTx(ctx, e.s, e.pool, tok, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, plain, 1); err != nil {
						return err
					}
					e.p.hole()
					return errFn
				})
			}
			return e.s.InTx(ctx, tok, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, plain, 1); err != nil {
					return err
				}
				e.p.hole()
				return errFn
			})
		}},
		{name: "start-run", holeFirst: true, setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			_, err := e.s.StartRun(ctx, tok, nil)
			return err
		}},
		{name: "finish-run", setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			id, err := e.s.StartRun(context.Background(), tok, nil)
			if err != nil {
				return err
			}
			e.p.hole()
			return e.s.FinishRun(ctx, tok, id, fence.Completion{})
		}},
		{name: "renew-batch", holeFirst: true, setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			_, err := e.s.RenewBatch(ctx, []fence.Token{tok}, time.Minute)
			return err
		}},
		{name: "revoke", holeFirst: true, setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			_, err := e.s.Revoke(ctx, tok.Lease)
			return err
		}},
		{name: "is-held", holeFirst: true, setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			_, err := e.s.IsHeld(ctx, tok)
			return err
		}},
		{name: "intx-hole-first", holeFirst: true, setup: acquireMine, call: func(ctx context.Context, e *env, tok fence.Token) error {
			if e.pool != nil {
				return fencepgx.InTx(ctx, e.s, e.pool, tok, func(pgx.Tx) error { return nil })
			}
			return e.s.InTx(ctx, tok, func(*sql.Tx) error { return nil })
		}},
	}
	for _, b := range []teststore.Backend{teststore.Postgres, teststore.Pgx, teststore.MySQL} {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			direct, dsn := b.OpenDSN(t)
			if direct.DB() == nil {
				// postgres-pgx: the direct store over database/sql.
				var err error
				if direct, err = fencedsn.Open(context.Background(), dsn, fence.WithPrefix(direct.Prefix())); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { direct.Close() })
			}
			table := testdb.WorkTable(t, direct.Prefix(), func(ctx context.Context, q string) error { _, err := direct.DB().ExecContext(ctx, q); return err })
			if _, err := direct.DB().Exec("INSERT INTO " + table + " (id, v) VALUES (1, 0)"); err != nil {
				t.Fatal(err)
			}
			for _, op := range ops {
				t.Run(op.name, func(t *testing.T) {
					u, err := url.Parse(dsn)
					if err != nil {
						t.Fatal(err)
					}
					p := newHoleProxy(t, u.Host)
					u.Host = p.ln.Addr().String()
					e := &env{direct: direct, p: p, table: table, lease: op.name}
					// On PostgreSQL the wait is black-holed once its release
					// watch is up (the second attempt: the first is refused,
					// then the watch starts and the store tries again).
					seen := &signalObserver{n: 1, ch: make(chan struct{})}
					if direct.Dialect() == fence.Postgres {
						seen.n = 2
					}
					opts := []fence.Option{fence.WithPrefix(direct.Prefix()), fence.WithObserver(seen)}
					if b.Name == teststore.Pgx.Name {
						e.s, e.pool = openPoolStore(t, u.String(), opts)
					} else {
						s, err := fencedsn.Open(context.Background(), u.String(), opts...)
						if err != nil {
							t.Fatal(err)
						}
						// Closing waits for nothing on the dead network.
						t.Cleanup(func() { go s.Close() })
						e.s = s
					}
					var tok fence.Token
					if op.setup != nil {
						tok = op.setup(t, e)
					}
					if op.holeFirst {
						p.hole()
					} else if op.name == "acquire-wait" {
						go func() { <-seen.ch; p.hole() }()
					}
					took, err := within(t, deadline, func() error {
						ctx, cancel := context.WithTimeout(context.Background(), deadline)
						defer cancel()
						return op.call(ctx, e, tok)
					})
					t.Logf("%s with the server black-holed: %v after %v", op.name, err, took.Round(time.Millisecond))
					if err == nil {
						t.Errorf("%s succeeded on a black-holed network", op.name)
					}
					if took > deadline+blackHoleMargin {
						t.Errorf("%s returned after %v; deadline %v, margin %v", op.name, took.Round(time.Millisecond), deadline, blackHoleMargin)
					}
				})
			}
		})
	}
}

// holeEnv is one case of TestBlackHoleCallsKeepTheirDeadline: the store
// through the proxy, and a direct one on the same tables.
type holeEnv struct {
	s, direct *fence.Store
	p         *holeProxy
	table     string
	pool      *pgxpool.Pool // the proxied store's pool on postgres-pgx
	lease     string        // the case's own lease name
}

// acquireMine acquires the case's lease on the proxied store, with the
// network up; its connections are then open when the hole starts.
func acquireMine(t *testing.T, e *holeEnv) fence.Token {
	t.Helper()
	l, err := e.s.Acquire(context.Background(), e.lease, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return l.Token
}

// waitForLockWait returns once a statement on the server waits for a row
// lock (the proxied store's write), or after 30 s.
func waitForLockWait(e *holeEnv) {
	q := "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
	if e.direct.Dialect() == fence.MySQL {
		q = "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'"
	}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		var n int
		if err := e.direct.DB().QueryRow(q).Scan(&n); err == nil && n > 0 {
			return
		}
	}
}

// openPoolStore opens a store over pgx's own pool at dsn.
func openPoolStore(t *testing.T, dsn string, opts []fence.Option) (*fence.Store, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	cfg, err := postgres.NewPoolConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { go p.Close() })
	d, err := postgres.NewPool(p, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := fence.New(ctx, d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// within runs call and returns how long it took; a call still running 20 s
// past limit fails t instead of hanging the test.
func within(t *testing.T, limit time.Duration, call func() error) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(limit + 20*time.Second):
		t.Fatalf("the call had not returned 20s after its deadline of %v", limit)
		return 0, nil
	}
}
