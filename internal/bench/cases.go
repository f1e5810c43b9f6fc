package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencepgx"
)

// Case is one operation of the per-operation table, measured against its
// baseline in the same run.
type Case struct {
	Name string
	// Baseline names the case this one is compared with ("" for a baseline).
	Baseline string
	// Target is the most this case may cost: a ratio to the baseline and a
	// number of round trips (0: no target).
	MaxRatio      float64
	MaxRoundTrips float64
	// On overrides the baseline and the ratio on some databases (the
	// issue's targets differ by database).
	On map[fence.Dialect]Goal
	// Dialects limits the case to some databases (nil: every one).
	Dialects []fence.Dialect
	// GivesUp says, for an alternative to fence, what it does not give.
	GivesUp string
	// Setup prepares the operation on e.
	Setup func(ctx context.Context, e *Env) (Op, error)
}

// Goal is a case's baseline and most ratio to it on one database.
type Goal struct {
	Baseline string
	MaxRatio float64
}

// For returns c with its goal on d.
func (c Case) For(d fence.Dialect) Case {
	if g, ok := c.On[d]; ok {
		c.Baseline, c.MaxRatio = g.Baseline, g.MaxRatio
	}
	return c
}

func (c Case) RunsOn(d fence.Dialect) bool {
	if c.Dialects == nil {
		return true
	}
	for _, x := range c.Dialects {
		if x == d {
			return true
		}
	}
	return false
}

// Baseline case names.
const (
	FloorUpdate = "floor_update"
	Select1     = "select_1"
)

const hour = time.Hour

// Cases returns the per-operation cases: the lease operations, fenced
// writes and the baselines they are compared with. Alternatives to fence
// (advisory locks, Redis) are in Alternatives.
func Cases() []Case {
	return []Case{
		{Name: FloorUpdate, Setup: setupFloor},
		{Name: Select1, Setup: setupSelect1},
		// Not a target: the floor UPDATE writing the columns an acquire
		// writes (holder, fence, state, expiry, times) with bound values,
		// to show how much of acquire's cost is the row it must write.
		{Name: "floor_update_wide", Baseline: FloorUpdate, Setup: setupFloorWide},
		// Not a target: the cheapest read of a table row, to show how much
		// of is_held and acquire_held any table access costs.
		{Name: "pk_select", Baseline: Select1, Setup: setupPKSelect},
		// The targets of issue 17 §4. SQLite's lease operations may cost
		// 1.15x; its reads are compared with a primary-key read, because a
		// table read in WAL mode pays shared-memory locks SELECT 1 does not.
		{Name: "acquire", Baseline: FloorUpdate, MaxRatio: 1.10, MaxRoundTrips: 1, On: sqliteLease, Setup: setupAcquire},
		{Name: "renew", Baseline: FloorUpdate, MaxRatio: 1.10, MaxRoundTrips: 1, On: sqliteLease, Setup: setupRenew},
		// Not a target: renew called with a context that can be cancelled,
		// as a Runner or a request handler calls it. database/sql then
		// starts a goroutine per query (Rows.awaitDone) that the floor's
		// Exec does not need; the other cases run with a context whose
		// Done channel is nil (see opCtx).
		{Name: "renew_cancel_ctx", Baseline: FloorUpdate, Setup: setupRenewCancelCtx},
		{Name: "release", Baseline: FloorUpdate, MaxRatio: 1.10, MaxRoundTrips: 1, On: sqliteLease, Setup: setupRelease},
		{Name: "takeover", Baseline: FloorUpdate, Setup: setupTakeover},
		{Name: "is_held", Baseline: Select1, MaxRatio: 1.5, On: sqliteRead, Setup: setupIsHeld},
		{Name: "acquire_held", Baseline: Select1, MaxRatio: 1.5, On: sqliteRead, Setup: setupAcquireHeld},
		{Name: "unfenced_write", Setup: setupWrite(false)},
		// MariaDB's fenced write may cost 1.20x where the rest is the
		// guard's share lock (docs/BENCHMARKS.md shows it).
		{Name: "fenced_write", Baseline: "unfenced_write", MaxRatio: 1.10,
			On: map[fence.Dialect]Goal{fence.MySQL: {"unfenced_write", 1.20}}, Setup: setupWrite(true)},
		// What Store.Exec costs on SQLite without its wrapping transaction:
		// the same fenced statement in autocommit (ExecIn on the *sql.DB).
		{Name: "fenced_write_autocommit", Baseline: "unfenced_write", Dialects: []fence.Dialect{fence.SQLite}, Setup: setupWriteAutocommit},
		// An upsert fed by a SELECT: the guard bounds the SELECT from
		// outside (a LIMIT on PostgreSQL, a CTE on MySQL, a derived table
		// on SQLite: docs/adr/0007-guard-placement.md).
		{Name: "unfenced_insert_select", Setup: setupInsertSelect(false)},
		{Name: "fenced_insert_select", Baseline: "unfenced_insert_select", Setup: setupInsertSelect(true)},
		{Name: "unfenced_tx", Setup: setupTx(false)},
		// Through database/sql; fencepgx's own transaction has 1.10x.
		{Name: "fenced_tx", Baseline: "unfenced_tx", MaxRatio: 1.25, Setup: setupTx(true)},
		// The same transaction through pgx's own API on a pgx pool:
		// fencepgx.InTx against BEGIN, UPDATE, COMMIT.
		{Name: "unfenced_tx_pgx", Dialects: []fence.Dialect{fence.Postgres}, Setup: setupTxPgx(false)},
		{Name: "fenced_tx_pgx", Baseline: "unfenced_tx_pgx", MaxRatio: 1.10, Dialects: []fence.Dialect{fence.Postgres}, Setup: setupTxPgx(true)},
		// Not targets: the statements of the fenced cases sent by hand,
		// without fence's API, so that every run shows which part of a
		// fenced case is the database's work and which is fence's Go side.
		// fenced_write_sql is the statement Store.Exec sends;
		// tx_pk_read is BEGIN, a plain primary-key read of the lease row,
		// the UPDATE and COMMIT (the fourth round trip database/sql cannot
		// batch, without the check's lock); tx_pgx_check_sql is
		// fencepgx.InTx's batch (BEGIN and the check with its share lock),
		// the UPDATE and COMMIT.
		{Name: "fenced_write_sql", Baseline: "unfenced_write", Setup: setupWriteSQL},
		{Name: "tx_pk_read", Baseline: "unfenced_tx", Setup: setupTxRead},
		{Name: "tx_pgx_check_sql", Baseline: "unfenced_tx_pgx", Dialects: []fence.Dialect{fence.Postgres}, Setup: setupTxPgxSQL},
	}
}

var (
	sqliteLease = map[fence.Dialect]Goal{fence.SQLite: {FloorUpdate, 1.15}}
	sqliteRead  = map[fence.Dialect]Goal{fence.SQLite: {"pk_select", 1.3}}
)

// setupFloor: a single-row UPDATE by primary key that changes the row, on a
// table shaped like the lease table, prepared, in autocommit: the cheapest
// durable write the database offers, the floor for acquire, renew and
// release.
func setupFloor(ctx context.Context, e *Env) (Op, error) {
	st, err := floorStmt(ctx, e, "renew_count = renew_count + 1")
	if err != nil {
		return Op{}, err
	}
	return Op{
		Do:    func(ctx context.Context) error { return oneRow(st.ExecContext(ctx, "floor")) },
		Close: func() { st.Close() },
	}, nil
}

func setupFloorWide(ctx context.Context, e *Env) (Op, error) {
	st, err := floorStmt(ctx, e, `owner_token = ?, fence_token = fence_token + 1,
		state = 'held', leased_until_ms = ?, acquired_at_ms = ?, updated_at_ms = ?`)
	if err != nil {
		return Op{}, err
	}
	owner := [2]string{"0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"}
	i := 0
	return Op{
		Do: func(ctx context.Context) error {
			i++
			now := time.Now().UnixMilli()
			return oneRow(st.ExecContext(ctx, owner[i%2], now+3600_000, now, now, "floor"))
		},
		Close: func() { st.Close() },
	}, nil
}

// floorStmt prepares an UPDATE of the floor table's row with the given SET
// list, its name the last placeholder. Prepared, as fence's own statements
// are (pgx caches them itself), so that the floor is not the parse.
func floorStmt(ctx context.Context, e *Env, set string) (*sql.Stmt, error) {
	t, err := floorTable(ctx, e)
	if err != nil {
		return nil, err
	}
	return e.DB.PrepareContext(ctx, e.Rebind(fmt.Sprintf("UPDATE %s SET %s WHERE lease_name = ?", t, set)))
}

// oneRow is nil when a statement ran and changed exactly one row.
func oneRow(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("bench: %d rows affected (%v), want 1", n, err)
	}
	return nil
}

func setupSelect1(ctx context.Context, e *Env) (Op, error) {
	return Op{Do: func(ctx context.Context) error {
		var n int
		return e.DB.QueryRowContext(ctx, "SELECT 1").Scan(&n)
	}}, nil
}

// floorTable creates, on first use, the lease-shaped table of the floor
// UPDATE and pk_select, with its one row.
func floorTable(ctx context.Context, e *Env) (string, error) {
	t := e.Table("floor")
	if e.hasTable(t) {
		return t, nil
	}
	if _, err := e.createLike(ctx, "floor"); err != nil {
		return "", err
	}
	ins := e.Rebind(fmt.Sprintf(`INSERT INTO %s (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms, renew_count)
		VALUES (?, 'o', 1, 'held', 0, 0, 0, 0)`, t))
	_, err := e.DB.ExecContext(ctx, ins, "floor")
	return t, err
}

// setupPKSelect: SELECT of one column of the floor table's row by primary
// key, prepared.
func setupPKSelect(ctx context.Context, e *Env) (Op, error) {
	t, err := floorTable(ctx, e)
	if err != nil {
		return Op{}, err
	}
	st, err := e.DB.PrepareContext(ctx, e.Rebind(fmt.Sprintf("SELECT fence_token FROM %s WHERE lease_name = ?", t)))
	if err != nil {
		return Op{}, err
	}
	return Op{
		Do: func(ctx context.Context) error {
			var f int64
			return st.QueryRowContext(ctx, "floor").Scan(&f)
		},
		Close: func() { st.Close() },
	}, nil
}

func execOne(ctx context.Context, e *Env, q string, args ...any) error {
	return oneRow(e.DB.ExecContext(ctx, q, args...))
}

// setupAcquire: acquiring a free lease (released by its last holder, so the
// row exists and the fence continues), released again untimed.
func setupAcquire(ctx context.Context, e *Env) (Op, error) {
	var held *fence.Token
	return Op{
		Prepare: func(ctx context.Context) error {
			if held == nil {
				return nil
			}
			err := e.Store.Release(ctx, *held)
			held = nil
			return err
		},
		Do: func(ctx context.Context) error {
			l, err := e.Store.Acquire(ctx, "b-acquire", hour)
			if err != nil {
				return err
			}
			held = &l.Token
			return nil
		},
		Close: func() {
			if held != nil {
				e.Store.Release(context.Background(), *held)
			}
		},
	}, nil
}

func setupRenew(ctx context.Context, e *Env) (Op, error) {
	l, err := e.Store.Acquire(ctx, "b-renew", hour)
	if err != nil {
		return Op{}, err
	}
	return Op{Do: func(ctx context.Context) error {
		_, err := e.Store.Renew(ctx, l.Token, hour)
		return err
	}}, nil
}

// setupRenewCancelCtx: renew with a cancellable context of its own (the
// harness gives Do one that cannot be cancelled).
func setupRenewCancelCtx(ctx context.Context, e *Env) (Op, error) {
	l, err := e.Store.Acquire(ctx, "b-renew-cc", hour)
	if err != nil {
		return Op{}, err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return Op{
		Do: func(context.Context) error {
			_, err := e.Store.Renew(cctx, l.Token, hour)
			return err
		},
		Close: cancel,
	}, nil
}

// setupRelease: releasing a held lease, acquired again untimed.
func setupRelease(ctx context.Context, e *Env) (Op, error) {
	var held fence.Token
	return Op{
		Prepare: func(ctx context.Context) error {
			l, err := e.Store.Acquire(ctx, "b-release", hour)
			held = l.Token
			return err
		},
		Do: func(ctx context.Context) error { return e.Store.Release(ctx, held) },
	}, nil
}

// setupTakeover: acquiring a lease whose holder let it lapse, so the row
// has another owner and a past expiry. The leases are a ring of names, each
// taken with a 1 ms TTL: by the time the ring comes round to a name again,
// hundreds of operations later, it has long lapsed. (Sleeping out the TTL
// before each takeover instead would measure an idle disk: a durable commit
// after a few idle milliseconds costs several times one in a busy stream.)
func setupTakeover(ctx context.Context, e *Env) (Op, error) {
	const (
		ttl  = time.Millisecond
		ring = 256
	)
	fences := make([]int64, ring)
	for i := range ring {
		l, err := e.Store.Acquire(ctx, fmt.Sprintf("b-takeover-%d", i), ttl)
		if err != nil {
			return Op{}, err
		}
		fences[i] = l.Token.Fence
	}
	time.Sleep(5 * time.Millisecond)
	i := 0
	return Op{Do: func(ctx context.Context) error {
		k := i % ring
		i++
		l, err := e.Store.Acquire(ctx, fmt.Sprintf("b-takeover-%d", k), ttl)
		if err != nil {
			return err
		}
		if l.Token.Fence <= fences[k] {
			return fmt.Errorf("bench: takeover fence %d after %d", l.Token.Fence, fences[k])
		}
		fences[k] = l.Token.Fence
		return nil
	}}, nil
}

func setupIsHeld(ctx context.Context, e *Env) (Op, error) {
	l, err := e.Store.Acquire(ctx, "b-isheld", hour)
	if err != nil {
		return Op{}, err
	}
	return Op{Do: func(ctx context.Context) error {
		ok, err := e.Store.IsHeld(ctx, l.Token)
		if err == nil && !ok {
			err = errors.New("bench: is-held said no")
		}
		return err
	}}, nil
}

// setupAcquireHeld: an acquire refused because another owner holds the
// lease. It must not cost a durable commit.
func setupAcquireHeld(ctx context.Context, e *Env) (Op, error) {
	if _, err := e.Store.Acquire(ctx, "b-held", hour); err != nil {
		return Op{}, err
	}
	return Op{Do: func(ctx context.Context) error {
		_, err := e.Store.Acquire(ctx, "b-held", hour)
		if errors.Is(err, fence.ErrHeld) {
			return nil
		}
		if err == nil {
			err = errors.New("bench: acquired a held lease")
		}
		return err
	}}, nil
}

// setupWrite: one UPDATE of a row by primary key, fenced (Store.Exec, the
// guard in the same statement) or not (the same statement without it).
func setupWrite(fenced bool) func(ctx context.Context, e *Env) (Op, error) {
	return func(ctx context.Context, e *Env) (Op, error) {
		t, l, err := itemsAndLease(ctx, e, fenced, "b-write")
		if err != nil {
			return Op{}, err
		}
		if !fenced {
			q := e.Rebind(fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = ?", t))
			return Op{Do: func(ctx context.Context) error { return execOne(ctx, e, q, 1) }}, nil
		}
		q := e.Rebind(fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = ? AND {{fence}}", t))
		return Op{Do: func(ctx context.Context) error {
			_, err := e.Store.Exec(ctx, l.Token, q, 1)
			return err
		}}, nil
	}
}

// setupInsertSelect: an upsert of one row fed by a SELECT, fenced
// (Store.Exec) or not (the same statement with the marker's TRUE).
func setupInsertSelect(fenced bool) func(ctx context.Context, e *Env) (Op, error) {
	return func(ctx context.Context, e *Env) (Op, error) {
		t, l, err := itemsAndLease(ctx, e, fenced, "b-insert-select")
		if err != nil {
			return Op{}, err
		}
		q := fmt.Sprintf("INSERT INTO %s (id, n) SELECT ?, 1 WHERE (1 = 1) AND {{fence}} ON CONFLICT (id) DO UPDATE SET n = %s.n + 1", t, t)
		if e.Store.Dialect() == fence.MySQL {
			q = fmt.Sprintf("INSERT INTO %s (id, n) SELECT ?, 1 FROM DUAL WHERE (1 = 1) AND {{fence}} ON DUPLICATE KEY UPDATE n = n + 1", t)
		}
		q = e.Rebind(q)
		if !fenced {
			q = strings.Replace(q, " AND {{fence}}", "", 1)
			return Op{Do: func(ctx context.Context) error {
				_, err := e.DB.ExecContext(ctx, q, 1)
				return err
			}}, nil
		}
		return Op{Do: func(ctx context.Context) error {
			_, err := e.Store.Exec(ctx, l.Token, q, 1)
			return err
		}}, nil
	}
}

func setupWriteAutocommit(ctx context.Context, e *Env) (Op, error) {
	t, l, err := itemsAndLease(ctx, e, true, "b-write-ac")
	if err != nil {
		return Op{}, err
	}
	q := e.Rebind(fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = ? AND {{fence}}", t))
	return Op{Do: func(ctx context.Context) error {
		_, err := e.Store.ExecIn(ctx, e.DB, l.Token, q, 1)
		return err
	}}, nil
}

// setupWriteSQL: fenced_write's statement, rendered by Store.Fenced once,
// sent with ExecContext on every call.
func setupWriteSQL(ctx context.Context, e *Env) (Op, error) {
	t, l, err := itemsAndLease(ctx, e, true, "b-write-sql")
	if err != nil {
		return Op{}, err
	}
	q, args, err := e.Store.Fenced(l.Token, e.Rebind(fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = ? AND {{fence}}", t)), 1)
	if err != nil {
		return Op{}, err
	}
	return Op{Do: func(ctx context.Context) error { return execOne(ctx, e, q, args...) }}, nil
}

// setupTxRead: unfenced_tx with a plain primary-key read of a lease row
// between BEGIN and the UPDATE.
func setupTxRead(ctx context.Context, e *Env) (Op, error) {
	t, l, err := itemsAndLease(ctx, e, true, "b-tx-read")
	if err != nil {
		return Op{}, err
	}
	read := e.Rebind(fmt.Sprintf("SELECT fence_token FROM %sleases WHERE lease_name = ?", e.prefix))
	q := e.Rebind(fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = ?", t))
	return Op{Do: func(ctx context.Context) error {
		return plainTx(ctx, e.DB, func(tx *sql.Tx) error {
			var f int64
			if err := tx.QueryRowContext(ctx, read, l.Token.Lease).Scan(&f); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, q, 2)
			return err
		})
	}}, nil
}

// plainTx runs fn in a transaction of db without fence: BEGIN, fn, COMMIT
// (ROLLBACK on fn's error).
func plainTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// setupTxPgxSQL: fencepgx.InTx's statements sent by hand on the pgx pool:
// BEGIN and the lease check (the query CheckWith gives, share lock
// included) in one batch, the UPDATE, COMMIT.
func setupTxPgxSQL(ctx context.Context, e *Env) (Op, error) {
	pool, err := e.Pgx(ctx)
	if err != nil {
		return Op{}, err
	}
	t, l, err := itemsAndLease(ctx, e, true, "b-tx-pgx-sql")
	if err != nil {
		return Op{}, err
	}
	var check string
	var checkArgs []any
	if err := e.Store.CheckWith(ctx, l.Token, func(_ context.Context, q string, args []any) (bool, error) {
		check, checkArgs = q, args
		return true, nil
	}); err != nil {
		return Op{}, err
	}
	q := e.Rebind(fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = ?", t))
	return Op{Do: func(ctx context.Context) error {
		var b pgx.Batch
		b.BeginTx(pgx.TxOptions{})
		b.Queue(check, checkArgs...)
		br := pool.SendBatch(ctx, &b)
		tx := br.Tx()
		var held bool
		_, err := br.Exec() // BEGIN's result
		if err == nil {
			err = br.QueryRow().Scan(&held)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err == nil && !held {
			err = errors.New("bench: the check said not held")
		}
		if err != nil {
			if tx != nil {
				tx.Rollback(context.WithoutCancel(ctx))
			}
			return err
		}
		tag, err := tx.Exec(ctx, q, 2)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("bench: %d rows affected, want 1", tag.RowsAffected())
		}
		if err != nil {
			tx.Rollback(context.WithoutCancel(ctx))
			return err
		}
		return tx.Commit(ctx)
	}}, nil
}

// setupTx: a transaction of one UPDATE by primary key, fenced (Store.InTx:
// the lease row share-locked and checked first) or not.
func setupTx(fenced bool) func(ctx context.Context, e *Env) (Op, error) {
	return func(ctx context.Context, e *Env) (Op, error) {
		t, l, err := itemsAndLease(ctx, e, fenced, "b-tx")
		if err != nil {
			return Op{}, err
		}
		q := e.Rebind(fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = ?", t))
		if fenced {
			return Op{Do: func(ctx context.Context) error {
				return e.Store.InTx(ctx, l.Token, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, q, 2)
					return err
				})
			}}, nil
		}
		return Op{Do: func(ctx context.Context) error {
			return plainTx(ctx, e.DB, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, q, 2)
				return err
			})
		}}, nil
	}
}

// setupTxPgx: setupTx's transaction on the Env's pgx pool, fenced
// (fencepgx.InTx) or not (Begin, the UPDATE, Commit).
func setupTxPgx(fenced bool) func(ctx context.Context, e *Env) (Op, error) {
	return func(ctx context.Context, e *Env) (Op, error) {
		pool, err := e.Pgx(ctx)
		if err != nil {
			return Op{}, err
		}
		t, l, err := itemsAndLease(ctx, e, fenced, "b-tx-pgx")
		if err != nil {
			return Op{}, err
		}
		q := e.Rebind(fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = ?", t))
		update := func(ctx context.Context, tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, q, 2)
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("bench: %d rows affected, want 1", tag.RowsAffected())
			}
			return err
		}
		if fenced {
			return Op{Do: func(ctx context.Context) error {
				return fencepgx.InTx(ctx, e.Store, pool, l.Token, func(tx pgx.Tx) error { return update(ctx, tx) })
			}}, nil
		}
		return Op{Do: func(ctx context.Context) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			if err := update(ctx, tx); err != nil {
				tx.Rollback(context.WithoutCancel(ctx))
				return err
			}
			return tx.Commit(ctx)
		}}, nil
	}
}

// itemsAndLease creates the items table on first use and, for the fenced
// variant, acquires the lease that fences it.
func itemsAndLease(ctx context.Context, e *Env, fenced bool, name string) (string, fence.Lease, error) {
	t := e.Table("items")
	if !e.hasTable(t) {
		if _, err := e.createItems(ctx, "items", 2); err != nil {
			return "", fence.Lease{}, err
		}
	}
	if !fenced {
		return t, fence.Lease{}, nil
	}
	l, err := e.Store.Acquire(ctx, name, hour)
	return t, l, err
}
