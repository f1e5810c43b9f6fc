package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
)

// The race cases check invariant 3 (no stale commit) as a history recorded by
// the database itself. Every round is the interleaving of the design notes'
// repro/pg-fence-fails-open.sh: holder A (fence f) starts a fenced write of
// a row that another transaction (the blocker) holds locked (on SQLite: the
// blocker holds the database write lock),
// and a takeover (revoke + acquire, or acquire after A's TTL lapsed) races
// it. Steps are shuffled from round to round so that both outcomes occur:
// the write lands before the takeover, or it is refused.
//
// Commit order comes from the database, not from Go: triggers on the lease
// table (every fence change) and on the protected row (every write) bump a
// one-row clock (one per worker, as are all the tables) and log (clock, kind, fence) in an events table, in the
// transaction that made the change. Each transaction holds the clock row's
// write lock from that bump until it commits (on SQLite, the database write
// lock), so the clock numbers events in commit order. The lease trigger never
// touches the protected row, and the blocker's change does not fire the row
// trigger, so the triggers add no lock wait that could hide a fail-open
// guard: a takeover still commits while a blocked write waits.
//
// The check: walking the events in clock order, every write carries exactly
// the highest fence committed before it (lower is a stale commit), fences
// increase, every write Go saw committed has exactly one event, every write
// Go saw refused has none, and every fence Go was handed is in the log.
//
// RaceCheckerCatchesBrokenFence runs the same rounds through deliberately
// broken fences (no share lock, check in a transaction without a lock, check
// in Go then write) and asserts that the checker finds stale commits where
// the database really lets them through.

func raceCases() []suiteCase {
	return []suiteCase{
		{"RaceTakeoverVersusFencedWrite", raceFencedWrites},
		{"RaceCheckerCatchesBrokenFence", raceBrokenFences},
	}
}

const (
	// raceMinRounds is what CI must run per database.
	raceMinRounds = 2000
	// raceWorkers run their rounds in parallel, each on its own tables and
	// lease (its own prefix), so they do not contend with each other. A
	// round mostly waits (for locks, commits, SQLite's busy handler), so
	// more workers than cores pay.
	raceWorkers = 8
	// A broken fence runs until it showed raceBrokenEnough stale commits,
	// at most raceBrokenMax rounds; a fence expected to hold runs
	// raceBrokenSafe rounds.
	raceBrokenEnough = 5
	raceBrokenMax    = 1000
	raceBrokenSafe   = 200
)

// raceRounds is the total number of rounds of the main case: 2048 with
// FENCE_LONG=1 (.ci/run), FENCE_RACE_ROUNDS to run more (or fewer, by
// hand), 256 otherwise, so that a default go test stays quick.
func raceRounds(t *testing.T) int {
	if v := os.Getenv("FENCE_RACE_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FENCE_RACE_ROUNDS=%q: want a positive integer", v)
		}
		return n
	}
	if testing.Short() || !testdb.LongEnabled() {
		return 256
	}
	return 2048
}

func raceSeed(t *testing.T) uint64 {
	if v := os.Getenv("FENCE_RACE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FENCE_RACE_SEED=%q: %v", v, err)
		}
		return n
	}
	return rand.Uint64()
}

// raceCtx is longer than ctxT's two minutes: thousands of rounds under -race
// on a small machine.
func raceCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// raceRig is one worker's tables: fence's own (a fresh prefix), the protected
// row, the clock and the event log, with the triggers that fill the log.
type raceRig struct {
	s      *fence.Store
	h      handle
	lease  string
	leases string // fence's lease table
	row    string // the protected table: one row, id 1
	clock  string
	events string
}

func newRaceRig(t *testing.T, b Backend) *raceRig {
	t.Helper()
	s := b.Open(t, prefix())
	p := s.Prefix()
	r := &raceRig{s: s, h: handleFor(s), lease: "race", leases: p + "leases", row: p + "race_row", clock: p + "race_clock", events: p + "race_events"}
	// Registered before anything is created, so a half-built rig is dropped
	// too; it runs before Open's cleanup drops fence's tables.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, q := range r.dropDDL() {
			if _, err := r.h.exec(ctx, q); err != nil {
				t.Errorf("race rig cleanup %q: %v", q, err)
			}
		}
	})
	ctx := ctxT(t)
	ddl := []string{
		"CREATE TABLE " + r.clock + " (id INT PRIMARY KEY, n BIGINT NOT NULL)",
		"INSERT INTO " + r.clock + " (id, n) VALUES (1, 0)",
		"CREATE TABLE " + r.events + " (seq BIGINT PRIMARY KEY, kind VARCHAR(16) NOT NULL, fence BIGINT NOT NULL, wid BIGINT NOT NULL)",
		"CREATE TABLE " + r.row + " (id INT PRIMARY KEY, wid BIGINT NOT NULL, fence_token BIGINT NOT NULL, note BIGINT NOT NULL)",
		"INSERT INTO " + r.row + " (id, wid, fence_token, note) VALUES (1, 0, 0, 0)",
	}
	for _, q := range append(ddl, r.triggerDDL()...) {
		if _, err := r.h.exec(ctx, q); err != nil {
			t.Fatalf("race rig: %v\n%s", err, q)
		}
	}
	return r
}

// triggerDDL logs every fence change of the lease row ('acquire' or
// 'revoke') and every write of the protected row ('write', with the fence
// the write stored and its write id) under the next clock value. A write is
// a change of wid; the blocker changes only note and is not logged.
func (r *raceRig) triggerDDL() []string {
	p := r.s.Prefix()
	switch r.s.Dialect() {
	case fence.Postgres:
		// The trigger function's statements run after the row change, in the
		// same transaction; RETURNING reads the clock value this transaction
		// set.
		return []string{
			`CREATE FUNCTION ` + p + `race_lease_ev() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v bigint;
BEGIN
	UPDATE ` + r.clock + ` SET n = n + 1 WHERE id = 1 RETURNING n INTO v;
	INSERT INTO ` + r.events + ` (seq, kind, fence, wid)
	VALUES (v, CASE WHEN NEW.state = 'revoked' THEN 'revoke' ELSE 'acquire' END, NEW.fence_token, 0);
	RETURN NULL;
END $$`,
			`CREATE FUNCTION ` + p + `race_row_ev() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v bigint;
BEGIN
	UPDATE ` + r.clock + ` SET n = n + 1 WHERE id = 1 RETURNING n INTO v;
	INSERT INTO ` + r.events + ` (seq, kind, fence, wid) VALUES (v, 'write', NEW.fence_token, NEW.wid);
	RETURN NULL;
END $$`,
			`CREATE TRIGGER ` + p + `race_lease_ins AFTER INSERT ON ` + r.leases + ` FOR EACH ROW EXECUTE FUNCTION ` + p + `race_lease_ev()`,
			`CREATE TRIGGER ` + p + `race_lease_upd AFTER UPDATE ON ` + r.leases + ` FOR EACH ROW WHEN (NEW.fence_token <> OLD.fence_token) EXECUTE FUNCTION ` + p + `race_lease_ev()`,
			`CREATE TRIGGER ` + p + `race_row_upd AFTER UPDATE ON ` + r.row + ` FOR EACH ROW WHEN (NEW.wid <> OLD.wid) EXECUTE FUNCTION ` + p + `race_row_ev()`,
		}
	case fence.MySQL:
		// One statement each (no DELIMITER through database/sql). The clock is
		// read back with a SELECT, which sees this transaction's own update;
		// LAST_INSERT_ID is left alone (fence's acquire and revoke return the
		// fence through it).
		body := func(kind, fenceCol, wid string) string {
			return `BEGIN
	DECLARE v BIGINT;
	UPDATE ` + r.clock + ` SET n = n + 1 WHERE id = 1;
	SELECT n INTO v FROM ` + r.clock + ` WHERE id = 1;
	INSERT INTO ` + r.events + ` (seq, kind, fence, wid) VALUES (v, ` + kind + `, ` + fenceCol + `, ` + wid + `);
END`
		}
		leaseKind := `IF(NEW.state = 'revoked', 'revoke', 'acquire')`
		return []string{
			`CREATE TRIGGER ` + p + `race_lease_ins AFTER INSERT ON ` + r.leases + ` FOR EACH ROW ` + body(leaseKind, "NEW.fence_token", "0"),
			`CREATE TRIGGER ` + p + `race_lease_upd AFTER UPDATE ON ` + r.leases + ` FOR EACH ROW
BEGIN
	IF NEW.fence_token <> OLD.fence_token THEN ` + body(leaseKind, "NEW.fence_token", "0") + `;
	END IF;
END`,
			`CREATE TRIGGER ` + p + `race_row_upd AFTER UPDATE ON ` + r.row + ` FOR EACH ROW
BEGIN
	IF NEW.wid <> OLD.wid THEN ` + body(`'write'`, "NEW.fence_token", "NEW.wid") + `;
	END IF;
END`,
		}
	default: // SQLite: every write transaction holds the database write lock.
		body := func(kind, wid string) string {
			return ` BEGIN
	UPDATE ` + r.clock + ` SET n = n + 1 WHERE id = 1;
	INSERT INTO ` + r.events + ` (seq, kind, fence, wid) SELECT n, ` + kind + `, NEW.fence_token, ` + wid + ` FROM ` + r.clock + ` WHERE id = 1;
END`
		}
		leaseKind := `CASE WHEN NEW.state = 'revoked' THEN 'revoke' ELSE 'acquire' END`
		return []string{
			`CREATE TRIGGER ` + p + `race_lease_ins AFTER INSERT ON ` + r.leases + ` FOR EACH ROW` + body(leaseKind, "0"),
			`CREATE TRIGGER ` + p + `race_lease_upd AFTER UPDATE ON ` + r.leases + ` FOR EACH ROW WHEN NEW.fence_token <> OLD.fence_token` + body(leaseKind, "0"),
			`CREATE TRIGGER ` + p + `race_row_upd AFTER UPDATE ON ` + r.row + ` FOR EACH ROW WHEN NEW.wid <> OLD.wid` + body(`'write'`, "NEW.wid"),
		}
	}
}

func (r *raceRig) dropDDL() []string {
	p := r.s.Prefix()
	tables := "DROP TABLE IF EXISTS " + r.row + ", " + r.events + ", " + r.clock
	switch r.s.Dialect() {
	case fence.Postgres:
		return []string{"DROP FUNCTION IF EXISTS " + p + "race_lease_ev(), " + p + "race_row_ev() CASCADE", tables}
	case fence.MySQL:
		return []string{
			"DROP TRIGGER IF EXISTS " + p + "race_lease_ins",
			"DROP TRIGGER IF EXISTS " + p + "race_lease_upd",
			"DROP TRIGGER IF EXISTS " + p + "race_row_upd",
			tables,
		}
	default:
		out := []string{
			"DROP TRIGGER IF EXISTS " + p + "race_lease_ins",
			"DROP TRIGGER IF EXISTS " + p + "race_lease_upd",
			"DROP TRIGGER IF EXISTS " + p + "race_row_upd",
		}
		// SQLite has no multi-table DROP.
		for _, tb := range []string{r.row, r.events, r.clock} {
			out = append(out, "DROP TABLE IF EXISTS "+tb)
		}
		return out
	}
}

// nowMs is the database clock in milliseconds, for the hand-written broken
// guards (fence's own guards come from the driver).
func (r *raceRig) nowMs() string {
	switch r.s.Dialect() {
	case fence.Postgres:
		return "(floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint"
	case fence.MySQL:
		return "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
	default:
		return "CAST(unixepoch('subsec') * 1000 AS INTEGER)"
	}
}

// setSQL writes the row with no guard: wid and the writer's fence.
func (r *raceRig) setSQL() string {
	return sqlf(r.s, "UPDATE "+r.row+" SET wid = ?, fence_token = ? WHERE id = 1")
}

// raceOutcome is how a write ended, as Go saw it.
type raceOutcome int

const (
	raceCommitted raceOutcome = iota
	raceRefused               // ErrLost, or zero rows from a hand-written guard
	raceRetryable             // a transient error (deadlock, serialization failure): must not have committed
	raceOutcomes
)

func (o raceOutcome) String() string {
	return [...]string{"committed", "refused", "retryable"}[o]
}

// raceWriter is one way of writing the protected row while holding tok.
type raceWriter struct {
	name  string
	write func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error)
}

// raceClassify maps a fenced call's result to an outcome.
func raceClassify(n int64, err error) (raceOutcome, error) {
	switch {
	case err == nil && n == 1:
		return raceCommitted, nil
	case err == nil:
		return 0, fmt.Errorf("%d rows affected, want 1", n)
	case errors.Is(err, fence.ErrLost):
		return raceRefused, nil
	case fence.IsRetryable(err):
		return raceRetryable, nil
	}
	return 0, err
}

// raceCommit commits tx and classifies the result of the whole transaction.
func raceCommit(ctx context.Context, tx txHandle, out raceOutcome, err error) (raceOutcome, error) {
	if err != nil || out != raceCommitted {
		_ = tx.rollback(ctx)
		return out, err
	}
	if err := tx.commit(ctx); err != nil {
		return raceClassify(0, fmt.Errorf("commit: %w", err))
	}
	return raceCommitted, nil
}

// raceIsolation is the isolation level that the "caller's transaction"
// writers use besides the default: READ COMMITTED on MySQL/MariaDB (the
// DESIGN warns that a single-table UPDATE … WHERE EXISTS may not lock the
// lease row there), none elsewhere (PostgreSQL's default already is READ
// COMMITTED; SQLite has one).
func raceIsolation(d fence.Dialect) (sql.IsolationLevel, bool) {
	if d == fence.MySQL {
		return sql.LevelReadCommitted, true
	}
	return sql.LevelDefault, false
}

// raceRealWriters are fence's own fences, in the forms a user calls them.
func raceRealWriters(d fence.Dialect) []raceWriter {
	fencedSQL := func(r *raceRig) string {
		return sqlf(r.s, "UPDATE "+r.row+" SET wid = ?, fence_token = ? WHERE id = 1 AND {{fence}}")
	}
	execInTx := func(iso sql.IsolationLevel) func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error) {
		return func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error) {
			tx, err := r.h.begin(ctx, iso)
			if err != nil {
				return 0, err
			}
			out, err := raceClassify(tx.fencedExec(ctx, tok, fencedSQL(r), wid, tok.Fence))
			return raceCommit(ctx, tx, out, err)
		}
	}
	checkTx := func(iso sql.IsolationLevel) func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error) {
		return func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error) {
			tx, err := r.h.begin(ctx, iso)
			if err != nil {
				return 0, err
			}
			if err := tx.check(ctx, tok); err != nil {
				out, err := raceClassify(0, err)
				return raceCommit(ctx, tx, out, err)
			}
			n, err := tx.exec(ctx, r.setSQL(), wid, tok.Fence)
			if err != nil {
				out, err := raceClassify(0, err)
				return raceCommit(ctx, tx, out, err)
			}
			out, err := raceClassify(n, nil)
			return raceCommit(ctx, tx, out, err)
		}
	}
	ws := []raceWriter{
		{"Exec", func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error) {
			return raceClassify(r.s.Exec(ctx, tok, fencedSQL(r), wid, tok.Fence))
		}},
		{"InTx", func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error) {
			var n int64
			err := r.h.inTx(ctx, tok, func(tx txHandle) error {
				var err error
				n, err = tx.exec(ctx, r.setSQL(), wid, tok.Fence)
				return err
			})
			if err == nil && n != 1 {
				return 0, fmt.Errorf("InTx update: %d rows affected, want 1", n)
			}
			if err != nil {
				return raceClassify(0, err)
			}
			return raceCommitted, nil
		}},
		{"ExecInCallersTx", execInTx(sql.LevelDefault)},
		{"CheckTxInCallersTx", checkTx(sql.LevelDefault)},
	}
	if iso, ok := raceIsolation(d); ok {
		isoName := strings.ToUpper(strings.ReplaceAll(iso.String(), " ", "-"))
		ws = append(ws,
			raceWriter{"ExecInCallersTx/" + isoName, execInTx(iso)},
			raceWriter{"CheckTxInCallersTx/" + isoName, checkTx(iso)},
		)
	}
	return ws
}

// raceBrokenWriter is a deliberately wrong fence and whether the database
// really lets a stale write through it (then the checker must catch one).
type raceBrokenWriter struct {
	raceWriter
	broken bool
	why    string
}

func raceBrokenWriters(d fence.Dialect) []raceBrokenWriter {
	// The lease-row check without any lock: a plain EXISTS.
	naiveGuard := func(r *raceRig) string {
		return sqlf(r.s, "UPDATE "+r.row+" SET wid = ?, fence_token = ? WHERE id = 1 AND EXISTS (SELECT 1 FROM "+r.leases+
			" WHERE lease_name = ? AND owner_token = ? AND fence_token = ? AND leased_until_ms > "+r.nowMs()+")")
	}
	naiveExec := func(iso sql.IsolationLevel) func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error) {
		return func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error) {
			args := []any{wid, tok.Fence, tok.Lease, tok.Owner, tok.Fence}
			if iso == sql.LevelDefault {
				n, err := r.h.exec(ctx, naiveGuard(r), args...)
				if err != nil {
					return 0, err
				}
				return raceRefusedIfZero(n)
			}
			tx, err := r.h.begin(ctx, iso)
			if err != nil {
				return 0, err
			}
			n, err := tx.exec(ctx, naiveGuard(r), args...)
			if err != nil {
				return raceCommit(ctx, tx, 0, err)
			}
			out, err := raceRefusedIfZero(n)
			return raceCommit(ctx, tx, out, err)
		}
	}
	// A transaction that checks the lease row with a plain SELECT, then
	// writes.
	naiveTx := func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error) {
		tx, err := r.h.begin(ctx, sql.LevelDefault)
		if err != nil {
			return 0, err
		}
		var n int64
		err = tx.queryRow(ctx, sqlf(r.s, "SELECT COUNT(*) FROM "+r.leases+" WHERE lease_name = ? AND owner_token = ? AND fence_token = ? AND leased_until_ms > "+r.nowMs()),
			tok.Lease, tok.Owner, tok.Fence).Scan(&n)
		if err != nil || n == 0 {
			return raceCommit(ctx, tx, raceRefused, err)
		}
		n, err = tx.exec(ctx, r.setSQL(), wid, tok.Fence)
		if err != nil {
			return raceCommit(ctx, tx, 0, err)
		}
		out, err := raceRefusedIfZero(n)
		return raceCommit(ctx, tx, out, err)
	}
	// IsHeld in Go, then an unguarded write: the race DESIGN warns about.
	checkThenWrite := func(ctx context.Context, r *raceRig, tok fence.Token, wid int64) (raceOutcome, error) {
		ok, err := r.s.IsHeld(ctx, tok)
		if err != nil || !ok {
			return raceRefused, err
		}
		n, err := r.h.exec(ctx, r.setSQL(), wid, tok.Fence)
		if err != nil {
			return 0, err
		}
		return raceRefusedIfZero(n)
	}
	ws := []raceBrokenWriter{
		{raceWriter{"CheckInGoThenWrite", checkThenWrite}, true, "the check and the write are two statements"},
	}
	switch d {
	case fence.Postgres:
		ws = append(ws,
			raceBrokenWriter{raceWriter{"PlainExistsGuard", naiveExec(sql.LevelDefault)}, true,
				"READ COMMITTED re-checks only the target row after the wait (DESIGN; repro/pg-fence-fails-open.sh exists)"},
			raceBrokenWriter{raceWriter{"PlainSelectThenWriteInTx", naiveTx}, true,
				"a plain SELECT takes no lock, so the takeover does not wait for the transaction"},
		)
	case fence.MySQL:
		ws = append(ws,
			raceBrokenWriter{raceWriter{"PlainExistsGuard", naiveExec(sql.LevelDefault)}, false,
				"REPEATABLE READ: InnoDB reads a DML statement's subquery rows with shared locks, so the plain EXISTS is fenced (measured; not asserted)"},
			raceBrokenWriter{raceWriter{"PlainExistsGuard/READ-COMMITTED", naiveExec(sql.LevelReadCommitted)}, true,
				"READ COMMITTED: the subquery is a consistent read without a lock"},
			raceBrokenWriter{raceWriter{"PlainSelectThenWriteInTx", naiveTx}, true,
				"a plain SELECT is a consistent read without a lock"},
		)
	default:
		ws = append(ws,
			raceBrokenWriter{raceWriter{"PlainExistsGuard", naiveExec(sql.LevelDefault)}, false,
				"SQLite: the statement checks and writes under the database write lock (measured; not asserted)"},
			raceBrokenWriter{raceWriter{"PlainSelectThenWriteInTx", naiveTx}, false,
				"SQLite: fence's handle begins IMMEDIATE, so the transaction holds the write lock from its check on (measured; not asserted)"},
		)
	}
	return ws
}

func raceRefusedIfZero(n int64) (raceOutcome, error) {
	switch n {
	case 0:
		return raceRefused, nil
	case 1:
		return raceCommitted, nil
	}
	return 0, fmt.Errorf("%d rows affected, want 0 or 1", n)
}

// racePlan is one round's shape.
type racePlan struct {
	writer  int           // index into the writers
	blocker bool          // another transaction holds the row while the write starts
	hold    time.Duration // how long the blocker keeps the lock
	expiry  bool          // take over after A's TTL lapsed, instead of revoke + acquire
	ttl     time.Duration // A's TTL (short for an expiry round)
	order   int           // 0: write, gap, takeover; 1: takeover, gap, write; 2: both at once
	gap     time.Duration
}

var raceOrders = [...]string{"write-first", "takeover-first", "together"}

func (p racePlan) String() string {
	b := "no blocker"
	if p.blocker {
		b = fmt.Sprintf("blocker holds %v", p.hold)
	}
	tk := "revoke+acquire"
	if p.expiry {
		tk = fmt.Sprintf("expiry (ttl %v)+acquire", p.ttl)
	}
	return fmt.Sprintf("%s, takeover %s, %s gap %v", b, tk, raceOrders[p.order], p.gap)
}

func newRacePlan(rng *rand.Rand, writers int) racePlan {
	p := racePlan{
		writer:  rng.IntN(writers),
		blocker: rng.IntN(8) != 0,
		hold:    time.Duration(rng.IntN(5001)) * time.Microsecond,
		expiry:  rng.IntN(4) == 0,
		ttl:     long,
		order:   rng.IntN(len(raceOrders)),
		gap:     time.Duration(rng.IntN(1500)) * time.Microsecond,
	}
	if p.expiry {
		p.ttl = time.Duration(2+rng.IntN(9)) * time.Millisecond
	}
	return p
}

// raceBump is a fence change Go was handed.
type raceBump struct {
	kind  string // "acquire" or "revoke"
	fence int64
}

// raceRound is what Go saw of one round.
type raceRound struct {
	n       int
	plan    racePlan
	writer  string
	wid     int64
	fence   int64 // the write's fence (A's)
	outcome raceOutcome
	bumps   []raceBump // the takeover's, in order
	retries int        // transient errors the takeover retried
}

// player is one worker: a rig, its writers, the plans and what Go saw.
// play continues where the last call stopped, so rounds can run in batches.
type racePlayer struct {
	r       *raceRig
	writers []raceWriter
	rng     *rand.Rand
	first   fence.Token // the first acquisition
	tok     fence.Token // the current holder, A of the next round
	plan    racePlan    // the next round's plan; tok has its TTL
	log     []raceRound
}

func newRacePlayer(ctx context.Context, r *raceRig, seed uint64, writers []raceWriter) (*racePlayer, error) {
	pl := &racePlayer{r: r, writers: writers, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
	pl.plan = newRacePlan(pl.rng, len(writers))
	l, err := r.s.Acquire(ctx, r.lease, pl.plan.ttl)
	if err != nil {
		return nil, fmt.Errorf("first acquire: %w", err)
	}
	pl.first, pl.tok = l.Token, l.Token
	return pl, nil
}

func (pl *racePlayer) play(ctx context.Context, rounds int) error {
	for range rounds {
		i := len(pl.log)
		next := newRacePlan(pl.rng, len(pl.writers))
		w := pl.writers[pl.plan.writer]
		rec := raceRound{n: i, plan: pl.plan, writer: w.name, wid: int64(i + 1), fence: pl.tok.Fence}
		nt, err := pl.r.round(ctx, &rec, pl.tok, next.ttl, w)
		if err != nil {
			return fmt.Errorf("round %d (writer %s, %s): %w", i, rec.writer, rec.plan, err)
		}
		pl.log = append(pl.log, rec)
		pl.tok, pl.plan = nt, next
	}
	return nil
}

// round plays one round: A (tok) writes while the lease is taken over; the
// new holder gets nextTTL and is returned.
func (r *raceRig) round(ctx context.Context, rec *raceRound, tok fence.Token, nextTTL time.Duration, w raceWriter) (fence.Token, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p := rec.plan
	var blockerDone chan error
	if p.blocker {
		tx, err := r.h.begin(ctx, sql.LevelDefault)
		if err != nil {
			return fence.Token{}, fmt.Errorf("blocker begin: %w", err)
		}
		if _, err := tx.exec(ctx, "UPDATE "+r.row+" SET note = note + 1 WHERE id = 1"); err != nil {
			tx.rollback(ctx)
			return fence.Token{}, fmt.Errorf("blocker lock: %w", err)
		}
		blockerDone = make(chan error, 1)
		go func() {
			time.Sleep(p.hold)
			blockerDone <- tx.commit(ctx)
		}()
	}
	var (
		wg                sync.WaitGroup
		writeErr, takeErr error
		newTok            fence.Token
	)
	write := func() {
		defer wg.Done()
		rec.outcome, writeErr = w.write(ctx, r, tok, rec.wid)
	}
	take := func() {
		defer wg.Done()
		newTok, takeErr = r.takeover(ctx, rec, nextTTL)
	}
	wg.Add(2)
	switch p.order {
	case 0:
		go write()
		time.Sleep(p.gap)
		go take()
	case 1:
		go take()
		time.Sleep(p.gap)
		go write()
	default:
		go write()
		go take()
	}
	wg.Wait()
	var blockErr error
	if blockerDone != nil {
		blockErr = <-blockerDone
	}
	return newTok, errors.Join(wrapIf("write", writeErr), wrapIf("takeover", takeErr), wrapIf("blocker commit", blockErr))
}

func wrapIf(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// takeover revokes and acquires, or (expiry round) acquires once A's TTL
// has lapsed by the database clock.
func (r *raceRig) takeover(ctx context.Context, rec *raceRound, ttl time.Duration) (fence.Token, error) {
	retry := func(err error) error {
		if !fence.IsRetryable(err) || rec.retries >= 50 {
			return err
		}
		rec.retries++
		return nil
	}
	if !rec.plan.expiry {
		for {
			f, err := r.s.Revoke(ctx, r.lease)
			if err == nil {
				rec.bumps = append(rec.bumps, raceBump{"revoke", f})
				break
			}
			if err := retry(err); err != nil {
				return fence.Token{}, err
			}
		}
	}
	for {
		l, err := r.s.Acquire(ctx, r.lease, ttl)
		if err == nil {
			rec.bumps = append(rec.bumps, raceBump{"acquire", l.Token.Fence})
			return l.Token, nil
		}
		if errors.Is(err, fence.ErrHeld) && rec.plan.expiry {
			time.Sleep(500 * time.Microsecond)
			continue
		}
		if err := retry(err); err != nil {
			return fence.Token{}, err
		}
	}
}

// raceEvent is one row of the event log.
type raceEvent struct {
	seq   int64
	kind  string
	fence int64
	wid   int64
}

func (e raceEvent) String() string {
	if e.kind == "write" {
		return fmt.Sprintf("#%d write wid %d fence %d", e.seq, e.wid, e.fence)
	}
	return fmt.Sprintf("#%d %s fence %d", e.seq, e.kind, e.fence)
}

func (r *raceRig) readEvents(ctx context.Context) ([]raceEvent, error) {
	rows, err := r.h.query(ctx, "SELECT seq, kind, fence, wid FROM "+r.events+" ORDER BY seq")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []raceEvent
	for rows.Next() {
		var e raceEvent
		if err := rows.Scan(&e.seq, &e.kind, &e.fence, &e.wid); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// raceTally is what the checker found.
type raceTally struct {
	rounds        int
	blocked       int
	landed        int // committed before the takeover's first fence change
	refused       int
	retryable     int
	violations    int // committed after a higher fence was committed
	landedBlocked int
	refusedBlock  int
	takeRetries   int
	events        int
	byWriter      map[string]*[raceOutcomes + 1]int // committed, refused, retryable, stale
	problems      []string                          // Go and the log disagree
	stale         []string                          // the violations, explained
}

func (a *raceTally) add(b raceTally) {
	a.rounds += b.rounds
	a.blocked += b.blocked
	a.landed += b.landed
	a.refused += b.refused
	a.retryable += b.retryable
	a.violations += b.violations
	a.landedBlocked += b.landedBlocked
	a.refusedBlock += b.refusedBlock
	a.takeRetries += b.takeRetries
	a.events += b.events
	if a.byWriter == nil {
		a.byWriter = map[string]*[raceOutcomes + 1]int{}
	}
	for k, v := range b.byWriter {
		if a.byWriter[k] == nil {
			a.byWriter[k] = new([raceOutcomes + 1]int)
		}
		for i := range v {
			a.byWriter[k][i] += v[i]
		}
	}
	a.problems = append(a.problems, b.problems...)
	a.stale = append(a.stale, b.stale...)
}

func (a raceTally) String() string {
	var ws []string
	for k := range a.byWriter {
		ws = append(ws, k)
	}
	sort.Strings(ws)
	var b strings.Builder
	fmt.Fprintf(&b, "%d takeover/write races (%d with a blocked row), %d logged events: write landed before the takeover %d (%d blocked), refused %d (%d blocked), transient error %d, STALE COMMITS %d; takeover retries %d",
		a.rounds, a.blocked, a.events, a.landed, a.landedBlocked, a.refused, a.refusedBlock, a.retryable, a.violations, a.takeRetries)
	for _, w := range ws {
		v := a.byWriter[w]
		fmt.Fprintf(&b, "\n    %-34s landed %4d  refused %4d  transient %3d  stale %3d", w, v[raceCommitted]-v[raceOutcomes], v[raceRefused], v[raceRetryable], v[raceOutcomes])
	}
	return b.String()
}

// check compares the rounds Go recorded with the event log in commit order.
func (r *raceRig) check(ctx context.Context, first fence.Token, log []raceRound) (raceTally, error) {
	evs, err := r.readEvents(ctx)
	if err != nil {
		return raceTally{}, err
	}
	tl := raceTally{rounds: len(log), events: len(evs), byWriter: map[string]*[raceOutcomes + 1]int{}}
	problem := func(format string, args ...any) {
		tl.problems = append(tl.problems, fmt.Sprintf("lease %s (tables %s*): ", r.lease, r.s.Prefix())+fmt.Sprintf(format, args...))
	}
	around := func(i int) string {
		lo, hi := max(i-4, 0), min(i+2, len(evs))
		var parts []string
		for _, e := range evs[lo:hi] {
			parts = append(parts, e.String())
		}
		return strings.Join(parts, ", ")
	}
	type bumpAt struct {
		seq  int64
		kind string
	}
	writes := map[int64][]raceEvent{}
	bumps := map[int64]bumpAt{}
	stale := map[int64]string{} // wid -> what the log shows
	var cur int64               // highest fence committed so far
	var curAt int
	for i, e := range evs {
		if e.seq != int64(i+1) {
			problem("event log has a gap: position %d has clock %d", i, e.seq)
		}
		switch e.kind {
		case "acquire", "revoke":
			if e.fence <= cur {
				problem("fence %d (%s) committed after fence %d: fences must increase in commit order (%s)", e.fence, e.kind, cur, around(i))
			}
			if _, dup := bumps[e.fence]; dup {
				problem("fence %d logged twice", e.fence)
			}
			bumps[e.fence] = bumpAt{e.seq, e.kind}
			cur, curAt = max(cur, e.fence), i
		case "write":
			writes[e.wid] = append(writes[e.wid], e)
			switch {
			case e.fence < cur:
				stale[e.wid] = fmt.Sprintf("STALE COMMIT: write %d carrying fence %d committed at clock %d, after fence %d (%s at clock %d) had committed; log: %s",
					e.wid, e.fence, e.seq, cur, evs[curAt].kind, evs[curAt].seq, around(i))
			case e.fence > cur:
				problem("write %d carries fence %d, which was never handed out before it (highest %d): %s", e.wid, e.fence, cur, around(i))
			}
		default:
			problem("unknown event kind %q", e.kind)
		}
	}
	wantBumps := 1
	if b, ok := bumps[first.Fence]; !ok || b.kind != "acquire" {
		problem("first acquisition (fence %d) not logged as an acquire", first.Fence)
	}
	for _, rd := range log {
		wantBumps += len(rd.bumps)
		tl.takeRetries += rd.retries
		for _, bp := range rd.bumps {
			if b, ok := bumps[bp.fence]; !ok || b.kind != bp.kind {
				problem("round %d: Go got %s fence %d, the log has %+v (present %v)", rd.n, bp.kind, bp.fence, b, ok)
			}
		}
		bw := tl.byWriter[rd.writer]
		if bw == nil {
			bw = new([raceOutcomes + 1]int)
			tl.byWriter[rd.writer] = bw
		}
		bw[rd.outcome]++
		if rd.plan.blocker {
			tl.blocked++
		}
		ws := writes[rd.wid]
		switch rd.outcome {
		case raceCommitted:
			if len(ws) != 1 {
				problem("round %d (%s, %s): Go saw write %d commit, the log has it %d times (silent loss or double write)", rd.n, rd.writer, rd.plan, rd.wid, len(ws))
				continue
			}
			if ws[0].fence != rd.fence {
				problem("round %d: write %d logged with fence %d, Go wrote fence %d", rd.n, rd.wid, ws[0].fence, rd.fence)
			}
			if msg, ok := stale[rd.wid]; ok {
				tl.violations++
				bw[raceOutcomes]++
				tl.stale = append(tl.stale, fmt.Sprintf("%s\n    round %d: writer %s, %s", msg, rd.n, rd.writer, rd.plan))
				delete(stale, rd.wid)
				continue
			}
			if len(rd.bumps) > 0 {
				if b, ok := bumps[rd.bumps[0].fence]; ok && b.seq < ws[0].seq {
					problem("round %d: write %d (clock %d) is after its takeover (clock %d) yet not stale", rd.n, rd.wid, ws[0].seq, b.seq)
				}
			}
			tl.landed++
			if rd.plan.blocker {
				tl.landedBlocked++
			}
		default:
			if len(ws) != 0 {
				problem("round %d (%s, %s): Go saw write %d %s, but it committed: %v", rd.n, rd.writer, rd.plan, rd.wid, rd.outcome, ws)
			}
			if rd.outcome == raceRefused {
				tl.refused++
				if rd.plan.blocker {
					tl.refusedBlock++
				}
			} else {
				tl.retryable++
			}
		}
	}
	for _, msg := range stale { // stale commits of writes Go did not see commit
		tl.violations++
		tl.stale = append(tl.stale, msg)
	}
	if len(bumps) != wantBumps {
		problem("the log has %d fence changes, Go made %d", len(bumps), wantBumps)
	}
	if n := len(writes); n != tl.landed+tl.violations {
		problem("the log has writes of %d ids, Go saw %d commit", n, tl.landed+tl.violations)
	}
	return tl, nil
}

// racePlay runs rounds on workers rigs in parallel, batch rounds per worker
// at a time, checks the whole history after every batch and goes on while
// more says so. It returns the combined tally.
func racePlay(t *testing.T, b Backend, workers, batch int, seed uint64, writersFor func(fence.Dialect) []raceWriter, more func(raceTally) bool) raceTally {
	t.Helper()
	ctx := raceCtx(t)
	players := make([]*racePlayer, workers)
	for i := range players {
		r := newRaceRig(t, b)
		pl, err := newRacePlayer(ctx, r, seed+uint64(i), writersFor(r.s.Dialect()))
		if err != nil {
			t.Fatal(err)
		}
		players[i] = pl
	}
	for {
		tallies := make([]raceTally, workers)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for i, pl := range players {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := pl.play(ctx, batch)
				tl, cerr := pl.r.check(ctx, pl.first, pl.log)
				errs[i], tallies[i] = errors.Join(err, cerr), tl
			}()
		}
		wg.Wait()
		var all raceTally
		failed := false
		for i := range tallies {
			all.add(tallies[i])
			if errs[i] != nil {
				t.Errorf("worker %d: %v", i, errs[i])
				failed = true
			}
		}
		if failed || len(all.problems) > 0 || !more(all) {
			for i, p := range all.problems {
				if i == 20 {
					t.Errorf("… %d more", len(all.problems)-i)
					break
				}
				t.Errorf("history check: %s", p)
			}
			return all
		}
	}
}

// raceFencedWrites: fence's fenced writes never commit after a takeover.
func raceFencedWrites(t *testing.T, b Backend) {
	total, seed := raceRounds(t), raceSeed(t)
	start := time.Now()
	tl := racePlay(t, b, raceWorkers, (total+raceWorkers-1)/raceWorkers, seed, raceRealWriters, func(raceTally) bool { return false })
	el := time.Since(start)
	// Logged first and on success too: go test -v shows the count.
	t.Logf("%s: %s\n    in %v (%d workers; FENCE_RACE_SEED=%d replays the plans)", b.Name, tl, el.Round(time.Millisecond), raceWorkers, seed)
	for i, s := range tl.stale {
		if i == 20 {
			t.Errorf("… %d more", len(tl.stale)-i)
			break
		}
		t.Error(s)
	}
	if tl.violations > 0 {
		t.Errorf("%d of %d races committed a stale write", tl.violations, tl.rounds)
	}
	if tl.rounds < total {
		t.Errorf("only %d of %d races ran", tl.rounds, total)
	} else if total < raceMinRounds && os.Getenv("FENCE_RACE_ROUNDS") == "" && !testing.Short() && testdb.LongEnabled() {
		t.Errorf("%d races, CI needs at least %d", total, raceMinRounds)
	}
	// Both outcomes of the race, with the row blocked, or the test is not
	// racing anything.
	if tl.landedBlocked == 0 || tl.refusedBlock == 0 {
		t.Errorf("not racing: with the row blocked, %d writes landed before the takeover and %d were refused; both must happen", tl.landedBlocked, tl.refusedBlock)
	}
}

// raceBrokenFences: the same rounds through broken fences, so the checker is
// shown to fail where the database lets a stale write through.
// It proves the checker, not fence, and takes the longest: FENCE_LONG=1.
func raceBrokenFences(t *testing.T, b Backend) {
	testdb.Long(t)
	seed := raceSeed(t)
	d := b.Open(t, prefix()).Dialect() // which broken fences apply
	for _, w := range raceBrokenWriters(d) {
		t.Run(strings.ReplaceAll(w.name, "/", "_"), func(t *testing.T) {
			start := time.Now()
			// Batches of raceWorkers×25 rounds: a broken fence stops once it
			// has shown a few stale commits; the others run a fixed number.
			more := func(tl raceTally) bool {
				if w.broken {
					return tl.violations < raceBrokenEnough && tl.rounds < raceBrokenMax
				}
				return tl.rounds < raceBrokenSafe
			}
			tl := racePlay(t, b, raceWorkers, 25, seed, func(fence.Dialect) []raceWriter { return []raceWriter{w.raceWriter} }, more)
			verdict := "not broken here"
			if tl.violations > 0 {
				verdict = "BROKEN"
			}
			t.Logf("%s %s: %s: %s\n    in %v (FENCE_RACE_SEED=%d); expected broken: %v (%s)",
				b.Name, w.name, verdict, tl, time.Since(start).Round(time.Millisecond), seed, w.broken, w.why)
			if len(tl.stale) > 0 {
				t.Logf("first: %s", tl.stale[0])
			}
			if w.broken && tl.violations == 0 {
				t.Errorf("the checker found no stale commit through the broken fence %s in %d races; it should (%s)", w.name, tl.rounds, w.why)
			}
			if !w.broken && tl.violations > 0 {
				t.Logf("NOTE: %s lets stale writes through on %s after all; it is not fence's fence, but the expectation above is wrong", w.name, b.Name)
			}
		})
	}
}
