package fencepgx_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencepgx"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/postgres"
)

// recorder is a pgx tracer that writes down what reaches the server, one
// entry per round trip ("query <sql>" or "batch <sql> ; <sql>"), and a
// dialer whose connections count the network turns (a read after a write)
// and can cut the connection right after sending a COMMIT.
type recorder struct {
	mu     sync.Mutex
	events []string
	turns  atomic.Int64
	// cutCommit, when set, closes the connection right after a write that
	// carries a COMMIT: the server gets it, its answer is lost.
	cutCommit atomic.Bool
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// take returns the events since the last take, and the turns.
func (r *recorder) take() ([]string, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e, r.turns.Swap(0)
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add("query " + d.SQL)
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var qs []string
	for _, q := range d.Batch.QueuedQueries {
		qs = append(qs, q.SQL)
	}
	r.add("batch " + strings.Join(qs, " ; "))
	return ctx
}

func (r *recorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *recorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &turnConn{Conn: c, r: r}, nil
}

type turnConn struct {
	net.Conn
	r     *recorder
	wrote atomic.Bool // atomic: pgx reads in the background during CopyFrom
}

func (c *turnConn) Write(b []byte) (int, error) {
	c.wrote.Store(true)
	n, err := c.Conn.Write(b)
	if err == nil && c.r.cutCommit.Load() && bytes.Contains(bytes.ToLower(b), []byte("commit")) {
		c.r.cutCommit.Store(false)
		c.Conn.Close()
	}
	return n, err
}

func (c *turnConn) Read(b []byte) (int, error) {
	if c.wrote.Swap(false) {
		c.r.turns.Add(1)
	}
	return c.Conn.Read(b)
}

// pgxConfig is the test database's pool configuration with r's tracer and
// dialer, no liveness ping on acquire (it would be a turn of its own), and
// mod applied.
func pgxConfig(t *testing.T, r *recorder, mod func(*pgxpool.Config)) *pgxpool.Config {
	t.Helper()
	cfg, err := postgres.NewPoolConfig(testdb.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = r
	cfg.ConnConfig.DialFunc = r.dial
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	if mod != nil {
		mod(cfg)
	}
	return cfg
}

func newPool(t *testing.T, r *recorder, mod func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.NewWithConfig(context.Background(), pgxConfig(t, r, mod))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := p.Ping(context.Background()); err != nil {
		testdb.Unreachable(t, "postgres", "FENCE_TEST_POSTGRES", err)
	}
	return p
}

func newConn(t *testing.T, r *recorder) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(context.Background(), pgxConfig(t, r, nil).ConnConfig)
	if err != nil {
		testdb.Unreachable(t, "postgres", "FENCE_TEST_POSTGRES", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// rig is a pgx-native store, a lease held on it, and an items table (id,
// n) with row 1 at 0.
type rig struct {
	s     *fence.Store
	admin *pgxpool.Pool // the store's own pool, for the test's checks
	tok   fence.Token
	items string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	s := teststore.Pgx.Open(t)
	ctx := context.Background()
	l, err := s.Acquire(ctx, "job", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{s: s, admin: s.Driver().(*postgres.Driver).Pool(), tok: l.Token, items: s.Prefix() + "items"}
	if _, err := r.admin.Exec(ctx, "CREATE TABLE "+r.items+" (id bigint PRIMARY KEY, n bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+r.items) })
	if _, err := r.admin.Exec(ctx, "INSERT INTO "+r.items+" VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) n(t *testing.T, id int) int64 {
	t.Helper()
	var n int64
	if err := r.admin.QueryRow(context.Background(), "SELECT n FROM "+r.items+" WHERE id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (r *rig) bump(ctx context.Context, tx pgx.Tx) error {
	tag, err := tx.Exec(ctx, "UPDATE "+r.items+" SET n = n + 1 WHERE id = 1")
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("%d rows affected", tag.RowsAffected())
	}
	return err
}

// takeover lets another owner take the lease (a revoke, then its acquire),
// committed: the rig's token is stale from here on.
func (r *rig) takeover(t *testing.T) fence.Token {
	t.Helper()
	ctx := context.Background()
	if _, err := r.s.Revoke(ctx, r.tok.Lease); err != nil {
		t.Fatal(err)
	}
	l, err := r.s.Acquire(ctx, r.tok.Lease, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return l.Token
}

// rowUnlocked fails t if anything still locks the lease row: a leftover
// share lock of a transaction InTx should have ended.
func (r *rig) rowUnlocked(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	tx, err := r.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var one int
	if err := tx.QueryRow(ctx, "SELECT 1 FROM "+r.s.Prefix()+"leases WHERE lease_name = $1 FOR UPDATE NOWAIT", r.tok.Lease).Scan(&one); err != nil {
		t.Errorf("lease row still locked: %v", err)
	}
}

// beginners are the Beginners InTx batches on, each with the recorder of
// its connections, and a function that says whether the connection it used
// is back outside any transaction.
type beginnerCase struct {
	name string
	make func(t *testing.T) (fencepgx.Beginner, *recorder, func(t *testing.T))
}

func beginners() []beginnerCase {
	return []beginnerCase{
		{"pgxpool.Pool", func(t *testing.T) (fencepgx.Beginner, *recorder, func(t *testing.T)) {
			r := &recorder{}
			p := newPool(t, r, func(c *pgxpool.Config) { c.MaxConns = 1 })
			return p, r, func(t *testing.T) { poolIdle(t, p) }
		}},
		{"pgx.Conn", func(t *testing.T) (fencepgx.Beginner, *recorder, func(t *testing.T)) {
			r := &recorder{}
			c := newConn(t, r)
			return c, r, func(t *testing.T) { connIdle(t, c) }
		}},
		{"pgxpool.Conn", func(t *testing.T) (fencepgx.Beginner, *recorder, func(t *testing.T)) {
			r := &recorder{}
			p := newPool(t, r, func(c *pgxpool.Config) { c.MaxConns = 1 })
			c, err := p.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Release)
			return c, r, func(t *testing.T) { connIdle(t, c.Conn()) }
		}},
	}
}

// poolIdle fails t unless p's one connection is back in the pool, idle and
// outside any transaction.
func poolIdle(t *testing.T, p *pgxpool.Pool) {
	t.Helper()
	if n := p.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired", n)
	}
	c, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	connIdle(t, c.Conn())
}

func connIdle(t *testing.T, c *pgx.Conn) {
	t.Helper()
	if c.IsClosed() {
		t.Fatalf("connection closed")
	}
	if s := c.PgConn().TxStatus(); s != 'I' {
		t.Fatalf("connection's transaction status %q, want 'I' (idle)", s)
	}
}

// InTx sends BEGIN and the lease check as one batch, one round trip, on a
// pool, a pool's connection and a connection: a fenced transaction of one
// UPDATE is three round trips (the batch, the UPDATE, COMMIT), as BEGIN,
// UPDATE, COMMIT are without the fence.
func TestInTxBeginsAndChecksInOneRoundTrip(t *testing.T) {
	for _, bc := range beginners() {
		t.Run(bc.name, func(t *testing.T) {
			r := newRig(t)
			b, rec, idle := bc.make(t)
			ctx := context.Background()
			// The first one prepares the statements (pgx's cache).
			if err := fencepgx.InTx(ctx, r.s, b, r.tok, func(tx pgx.Tx) error { return r.bump(ctx, tx) }); err != nil {
				t.Fatal(err)
			}
			rec.take()
			if err := fencepgx.InTx(ctx, r.s, b, r.tok, func(tx pgx.Tx) error { return r.bump(ctx, tx) }); err != nil {
				t.Fatal(err)
			}
			events, turns := rec.take()
			if len(events) != 3 || !strings.HasPrefix(events[0], "batch begin ; SELECT EXISTS") ||
				!strings.Contains(events[0], "FOR SHARE") || !strings.HasPrefix(events[1], "query UPDATE") || events[2] != "query commit" {
				t.Errorf("InTx sent:\n%s\nwant the batch of BEGIN and the check, the UPDATE, COMMIT", strings.Join(events, "\n"))
			}
			if turns != 3 {
				t.Errorf("InTx took %d network round trips, want 3", turns)
			}
			if n := r.n(t, 1); n != 2 {
				t.Errorf("n = %d after two fenced transactions, want 2", n)
			}
			idle(t)
		})
	}
}

// Any other Beginner still works, through b.Begin and CheckTx.
type plainBeginner struct{ p *pgxpool.Pool }

func (b plainBeginner) Begin(ctx context.Context) (pgx.Tx, error) { return b.p.Begin(ctx) }

func TestInTxOtherBeginner(t *testing.T) {
	r := newRig(t)
	rec := &recorder{}
	p := newPool(t, rec, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	rec.take()
	if err := fencepgx.InTx(ctx, r.s, plainBeginner{p}, r.tok, func(tx pgx.Tx) error { return r.bump(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
	// Another Beginner's Begin may have opened a savepoint (a pgx.Tx's
	// does): the check also tests for one.
	if events, _ := rec.take(); len(events) != 4 || events[0] != "query begin" || !strings.HasPrefix(events[1], "query SELECT CASE WHEN pg_export_snapshot()") {
		t.Errorf("InTx on another Beginner sent:\n%s", strings.Join(events, "\n"))
	}
	if n := r.n(t, 1); n != 1 {
		t.Errorf("n = %d, want 1", n)
	}
	now := r.takeover(t)
	called := false
	err := fencepgx.InTx(ctx, r.s, plainBeginner{p}, r.tok, func(pgx.Tx) error { called = true; return nil })
	if !errors.Is(err, fence.ErrLost) || called {
		t.Errorf("stale InTx on another Beginner: %v (fn called %v)", err, called)
	}
	poolIdle(t, p)

	// A pgx.Tx is a Beginner too, whose Begin is a savepoint: refused as
	// before, and the outer transaction is untouched.
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	called = false
	if err := fencepgx.InTx(ctx, r.s, tx, now, func(pgx.Tx) error { called = true; return nil }); !errors.Is(err, fence.ErrInvalid) || called {
		t.Errorf("InTx on a pgx.Tx: %v (fn called %v)", err, called)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("outer transaction after InTx on it: %v", err)
	}
}

// A takeover committed before InTx's batch: the check refuses, fn is not
// called, nothing is written, the transaction is rolled back and the
// connection goes back idle (a pool's to the pool) with no lock left on the
// lease row. The new holder then writes through the same connection.
func TestInTxStaleOwner(t *testing.T) {
	for _, bc := range beginners() {
		t.Run(bc.name, func(t *testing.T) {
			r := newRig(t)
			b, _, idle := bc.make(t)
			ctx := context.Background()
			now := r.takeover(t)
			called := false
			err := fencepgx.InTx(ctx, r.s, b, r.tok, func(tx pgx.Tx) error { called = true; return r.bump(ctx, tx) })
			var lost *fence.LostError
			if !errors.Is(err, fence.ErrLost) || !errors.As(err, &lost) || lost.Reason != fence.LostSuperseded || called {
				t.Fatalf("InTx with a superseded token: %v (fn called %v)", err, called)
			}
			if n := r.n(t, 1); n != 0 {
				t.Errorf("n = %d after a refused InTx", n)
			}
			idle(t)
			r.rowUnlocked(t)
			if err := fencepgx.InTx(ctx, r.s, b, now, func(tx pgx.Tx) error { return r.bump(ctx, tx) }); err != nil {
				t.Fatalf("the new holder's InTx: %v", err)
			}
			if n := r.n(t, 1); n != 1 {
				t.Errorf("n = %d after the new holder's InTx", n)
			}
			idle(t)
		})
	}
}

// A takeover in flight (its UPDATE of the lease row not yet committed) when
// InTx's batch arrives: the check waits for it on the row lock, then sees
// the new generation and refuses.
func TestInTxWaitsForTakeoverInFlight(t *testing.T) {
	r := newRig(t)
	rec := &recorder{}
	p := newPool(t, rec, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	var pid int
	if err := p.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tk, err := r.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Rollback(ctx)
	// A revoke's write, as the store makes it: a new fence on the row.
	if _, err := tk.Exec(ctx, "UPDATE "+r.s.Prefix()+"leases SET fence_token = fence_token + 1, state = 'revoked' WHERE lease_name = $1", r.tok.Lease); err != nil {
		t.Fatal(err)
	}
	var called atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- fencepgx.InTx(ctx, r.s, p, r.tok, func(tx pgx.Tx) error { called.Store(true); return r.bump(ctx, tx) })
	}()
	waitLocked(t, r.admin, pid)
	if err := tk.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, fence.ErrLost) || called.Load() {
		t.Fatalf("InTx behind an in-flight takeover: %v (fn called %v)", err, called.Load())
	}
	if n := r.n(t, 1); n != 0 {
		t.Errorf("n = %d after a refused InTx", n)
	}
	poolIdle(t, p)
}

func waitLocked(t *testing.T, p *pgxpool.Pool, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var waiting bool
		err := p.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`, pid).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("backend %d never waited for a lock", pid)
}

// The check failing with an error of its own (here lock_timeout behind a
// FOR UPDATE on the lease row) leaves the transaction aborted inside the
// batch: InTx rolls it back, and the connection goes back idle.
func TestInTxCheckErrorLeavesNoTransaction(t *testing.T) {
	r := newRig(t)
	rec := &recorder{}
	p := newPool(t, rec, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.RuntimeParams["lock_timeout"] = "50ms"
	})
	ctx := context.Background()
	blk, err := r.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blk.Rollback(ctx)
	if _, err := blk.Exec(ctx, "SELECT 1 FROM "+r.s.Prefix()+"leases WHERE lease_name = $1 FOR UPDATE", r.tok.Lease); err != nil {
		t.Fatal(err)
	}
	called := false
	err = fencepgx.InTx(ctx, r.s, p, r.tok, func(pgx.Tx) error { called = true; return nil })
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" || errors.Is(err, fence.ErrLost) || called {
		t.Fatalf("InTx behind a row lock with lock_timeout: %v (fn called %v)", err, called)
	}
	poolIdle(t, p)
	blk.Rollback(ctx)
	if err := fencepgx.InTx(ctx, r.s, p, r.tok, func(tx pgx.Tx) error { return r.bump(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
}

// A BEGIN that never reaches the server (a closed pool) is a begin error,
// and fn is not called.
func TestInTxBeginError(t *testing.T) {
	r := newRig(t)
	p := newPool(t, &recorder{}, nil)
	p.Close()
	called := false
	err := fencepgx.InTx(context.Background(), r.s, p, r.tok, func(pgx.Tx) error { called = true; return nil })
	if err == nil || !strings.Contains(err.Error(), "fence: begin for lease") || errors.Is(err, fence.ErrLost) || called {
		t.Errorf("InTx on a closed pool: %v (fn called %v)", err, called)
	}
}

// fn gets a whole pgx transaction: the one pgx began in the batch, with
// every method of pgx.Tx.
func TestInTxTransactionIsFaithful(t *testing.T) {
	for _, bc := range beginners() {
		t.Run(bc.name, func(t *testing.T) {
			r := newRig(t)
			b, _, idle := bc.make(t)
			ctx := context.Background()
			var data []byte
			err := fencepgx.InTx(ctx, r.s, b, r.tok, func(tx pgx.Tx) error {
				if tx.Conn() == nil {
					return errors.New("Conn() is nil")
				}
				if err := r.bump(ctx, tx); err != nil {
					return fmt.Errorf("Exec: %w", err)
				}
				var n int64
				if err := tx.QueryRow(ctx, "SELECT n FROM "+r.items+" WHERE id = 1").Scan(&n); err != nil || n != 1 {
					return fmt.Errorf("QueryRow: %d, %v", n, err)
				}
				rows, err := tx.Query(ctx, "SELECT id FROM "+r.items+" ORDER BY id")
				if err != nil {
					return fmt.Errorf("Query: %w", err)
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil || len(ids) != 1 {
					return fmt.Errorf("Query rows: %v, %v", ids, err)
				}
				if _, err := tx.CopyFrom(ctx, pgx.Identifier{r.items}, []string{"id", "n"}, pgx.CopyFromRows([][]any{{2, 20}, {3, 30}})); err != nil {
					return fmt.Errorf("CopyFrom: %w", err)
				}
				var batch pgx.Batch
				batch.Queue("UPDATE " + r.items + " SET n = n + 1 WHERE id = 2")
				batch.Queue("UPDATE " + r.items + " SET n = n + 1 WHERE id = 3")
				if err := tx.SendBatch(ctx, &batch).Close(); err != nil {
					return fmt.Errorf("SendBatch: %w", err)
				}
				if _, err := tx.Prepare(ctx, "fencepgx_test_bump", "UPDATE "+r.items+" SET n = n + $1 WHERE id = 2"); err != nil {
					return fmt.Errorf("Prepare: %w", err)
				}
				if _, err := tx.Exec(ctx, "fencepgx_test_bump", 100); err != nil {
					return fmt.Errorf("Exec prepared: %w", err)
				}
				// Savepoints, as on any pgx transaction; CheckTx refuses one.
				sp, err := tx.Begin(ctx)
				if err != nil {
					return fmt.Errorf("Begin (savepoint): %w", err)
				}
				if err := fencepgx.CheckTx(ctx, r.s, sp, r.tok); !errors.Is(err, fence.ErrInvalid) {
					return fmt.Errorf("CheckTx on a savepoint: %v", err)
				}
				if _, err := sp.Exec(ctx, "UPDATE "+r.items+" SET n = -1 WHERE id = 3"); err != nil {
					return err
				}
				if err := sp.Rollback(ctx); err != nil {
					return fmt.Errorf("savepoint rollback: %w", err)
				}
				sp, err = tx.Begin(ctx)
				if err != nil {
					return err
				}
				if _, err := sp.Exec(ctx, "UPDATE "+r.items+" SET n = n + 1000 WHERE id = 3"); err != nil {
					return err
				}
				if err := sp.Commit(ctx); err != nil {
					return fmt.Errorf("savepoint release: %w", err)
				}
				// Large objects, which live in transactions.
				lo := tx.LargeObjects()
				oid, err := lo.Create(ctx, 0)
				if err != nil {
					return fmt.Errorf("LargeObjects.Create: %w", err)
				}
				obj, err := lo.Open(ctx, oid, pgx.LargeObjectModeRead|pgx.LargeObjectModeWrite)
				if err != nil {
					return fmt.Errorf("LargeObjects.Open: %w", err)
				}
				if _, err := obj.Write([]byte("fenced")); err != nil {
					return fmt.Errorf("LargeObject.Write: %w", err)
				}
				if _, err := obj.Seek(0, io.SeekStart); err != nil {
					return err
				}
				if data, err = io.ReadAll(obj); err != nil {
					return fmt.Errorf("LargeObject.Read: %w", err)
				}
				if err := obj.Close(); err != nil {
					return err
				}
				return lo.Unlink(ctx, oid)
			})
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != "fenced" {
				t.Errorf("large object read back %q", data)
			}
			if a, b2, c := r.n(t, 1), r.n(t, 2), r.n(t, 3); a != 1 || b2 != 121 || c != 1031 {
				t.Errorf("after commit n = %d, %d, %d; want 1, 121, 1031", a, b2, c)
			}
			idle(t)
		})
	}
}

// A COMMIT the server answers with ROLLBACK (fn swallowed a failed
// statement) is pgx.ErrTxCommitRollback, as pgx reports it: definite, not
// ambiguous. A COMMIT whose answer is lost is fence.ErrAmbiguous.
func TestInTxCommitOutcomes(t *testing.T) {
	for _, bc := range beginners() {
		t.Run(bc.name, func(t *testing.T) {
			r := newRig(t)
			b, rec, idle := bc.make(t)
			ctx := context.Background()
			err := fencepgx.InTx(ctx, r.s, b, r.tok, func(tx pgx.Tx) error {
				if err := r.bump(ctx, tx); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "SELECT 1 / 0")
				if err == nil {
					return errors.New("1 / 0 succeeded")
				}
				return nil // swallowed: the transaction is aborted
			})
			if !errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, fence.ErrAmbiguous) {
				t.Errorf("InTx whose COMMIT rolled back: %v", err)
			}
			if n := r.n(t, 1); n != 0 {
				t.Errorf("n = %d after a rolled back commit", n)
			}
			idle(t)
			if bc.name == "pgxpool.Conn" {
				return // the cut connection would be the only one
			}
			rec.cutCommit.Store(true)
			err = fencepgx.InTx(ctx, r.s, b, r.tok, func(tx pgx.Tx) error { return r.bump(ctx, tx) })
			if !errors.Is(err, fence.ErrAmbiguous) {
				t.Errorf("InTx whose COMMIT answer was lost: %v", err)
			}
		})
	}
}
