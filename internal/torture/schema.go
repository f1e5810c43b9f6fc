package torture

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/fencekit/fence"
)

// The harness's own tables, next to fence's (same prefix):
//
//	t_prot   one protected row per lease: the fence and op id of the last
//	         committed write and a write counter
//	t_side   per lease, the number of committed transactional writes (a
//	         second row each fenced transaction changes, to check atomicity)
//	t_clock  per lease, a counter that numbers that lease's events
//	t_events every change of the lease row (acquire, renew, release, revoke)
//	         and every write of the protected row, logged by triggers in the
//	         transaction that made the change
//	t_names  per lease, an alias row nobody writes: the read-only table the
//	         CTE, join and INSERT … SELECT write shapes read (shapes.go)
//	t_queue  work items the DELETE shape consumes; deleting one writes the
//	         protected row (trigger), carrying the fence the item was queued with
//	t_done   rows the INSERT … SELECT shapes add; inserting one writes the
//	         protected row (trigger)
//	t_snap   the rollback fault's copy of the lease table (rollback.go)
//
// The triggers bump the lease's clock row and log the event under the new
// value. The clock row stays write-locked until the transaction commits (on
// SQLite the database write lock does the same), so within a lease the clock
// numbers events in commit order: the order the database really applied
// them in, which Go cannot observe. The clock is per lease so that leases do
// not serialise on one row. fencetest/race_cases.go uses the same scheme.
type schema struct {
	d      fence.Dialect
	p      string
	leases string
	prot   string
	side   string
	clock  string
	events string
	names  string
	queue  string
	done   string
	snap   string
	// binlog: the events are ordered by a Galera node's binary log
	// (binlog.go), not by the clock row; the triggers key each event with
	// a random number and write no shared row.
	binlog bool
}

func newSchema(d fence.Dialect, prefix string) schema {
	return schema{d: d, p: prefix, leases: prefix + "leases", prot: prefix + "t_prot", side: prefix + "t_side",
		clock: prefix + "t_clock", events: prefix + "t_events", names: prefix + "t_names", queue: prefix + "t_queue",
		done: prefix + "t_done", snap: prefix + "t_snap"}
}

// q turns ? placeholders into $n on PostgreSQL. The harness's statements
// have no '?' inside literals.
func (s schema) q(query string) string {
	if s.d != fence.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (s schema) createDDL() []string {
	ddl := []string{
		"CREATE TABLE " + s.prot + " (lease_name VARCHAR(191) PRIMARY KEY, fence BIGINT NOT NULL, cnt BIGINT NOT NULL, opid BIGINT NOT NULL, kind VARCHAR(8) NOT NULL)",
		"CREATE TABLE " + s.side + " (lease_name VARCHAR(191) PRIMARY KEY, txcnt BIGINT NOT NULL)",
		"CREATE TABLE " + s.clock + " (lease_name VARCHAR(191) PRIMARY KEY, n BIGINT NOT NULL)",
		"CREATE TABLE " + s.events + " (lease_name VARCHAR(191) NOT NULL, seq BIGINT NOT NULL, kind VARCHAR(8) NOT NULL, fence BIGINT NOT NULL, owner VARCHAR(64) NOT NULL, until_ms BIGINT NOT NULL, at_ms BIGINT NOT NULL, opid BIGINT NOT NULL, PRIMARY KEY (lease_name, seq))",
		"CREATE TABLE " + s.names + " (alias VARCHAR(191) PRIMARY KEY, lease_name VARCHAR(191) NOT NULL)",
		"CREATE TABLE " + s.queue + " (opid BIGINT PRIMARY KEY, lease_name VARCHAR(191) NOT NULL, fence BIGINT NOT NULL)",
		"CREATE TABLE " + s.done + " (opid BIGINT PRIMARY KEY, lease_name VARCHAR(191) NOT NULL, fence BIGINT NOT NULL, kind VARCHAR(8) NOT NULL)",
		"CREATE TABLE " + s.snap + " (lease_name VARCHAR(191) PRIMARY KEY, owner_token VARCHAR(64) NOT NULL, fence_token BIGINT NOT NULL, state VARCHAR(16) NOT NULL, leased_until_ms BIGINT NOT NULL, acquired_at_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL, renew_count BIGINT NOT NULL)",
	}
	// The DELETE and INSERT … SELECT shapes write other tables; a trigger
	// turns each row they delete or insert into a write of the protected
	// row, with the fence and op id the row carries, so the protected row's
	// own trigger logs it like every other write (event kind: the shape).
	protFrom := func(row, kind string) string {
		return "UPDATE " + s.prot + " SET fence = " + row + ".fence, cnt = cnt + 1, opid = " + row + ".opid, kind = " + kind + " WHERE lease_name = " + row + ".lease_name"
	}
	// Lease events: kind from what changed. at_ms is the database time the
	// statement itself recorded (acquired_at_ms for an acquisition,
	// updated_at_ms otherwise: a revoke leaves acquired_at_ms alone), so the
	// mutual-exclusion check compares the database's own instants, and the
	// barrier check can tell a statement that ran across a barrier.
	leaseKind := `CASE WHEN NEW.fence_token <> OLD.fence_token AND NEW.state = 'revoked' THEN 'revoke'
		WHEN NEW.fence_token <> OLD.fence_token THEN 'acquire'
		WHEN NEW.state = 'released' THEN 'release' ELSE 'renew' END`
	insKind := `'acquire'`
	at := `CASE WHEN NEW.fence_token <> OLD.fence_token AND NEW.state <> 'revoked' THEN NEW.acquired_at_ms ELSE NEW.updated_at_ms END`
	// MySQL's INSERT … ON DUPLICATE KEY UPDATE fires the update trigger even
	// when the lease was held and nothing changed; only log real changes.
	changed := `(NEW.fence_token <> OLD.fence_token OR NEW.renew_count <> OLD.renew_count OR NEW.state <> OLD.state OR NEW.leased_until_ms <> OLD.leased_until_ms)`
	switch s.d {
	case fence.Postgres:
		ins := func(kind, fenceCol, owner, until, atms, opid string) string {
			return `UPDATE ` + s.clock + ` SET n = n + 1 WHERE lease_name = NEW.lease_name RETURNING n INTO v;
	INSERT INTO ` + s.events + ` (lease_name, seq, kind, fence, owner, until_ms, at_ms, opid)
	VALUES (NEW.lease_name, v, ` + kind + `, ` + fenceCol + `, ` + owner + `, ` + until + `, ` + atms + `, ` + opid + `);`
		}
		fn := func(name, body string) string {
			return `CREATE FUNCTION ` + s.p + name + `() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v bigint;
BEGIN
	` + body + `
	RETURN NULL;
END $$`
		}
		ddl = append(ddl,
			fn("t_lease_ins", ins(insKind, "NEW.fence_token", "NEW.owner_token", "NEW.leased_until_ms", "NEW.acquired_at_ms", "0")),
			fn("t_lease_upd", ins(leaseKind, "NEW.fence_token", "NEW.owner_token", "NEW.leased_until_ms", at, "0")),
			fn("t_prot_upd", ins("NEW.kind", "NEW.fence", "''", "0", "0", "NEW.opid")),
			`CREATE TRIGGER `+s.p+`t_lease_ins AFTER INSERT ON `+s.leases+` FOR EACH ROW EXECUTE FUNCTION `+s.p+`t_lease_ins()`,
			`CREATE TRIGGER `+s.p+`t_lease_upd AFTER UPDATE ON `+s.leases+` FOR EACH ROW WHEN `+changed+` EXECUTE FUNCTION `+s.p+`t_lease_upd()`,
			`CREATE TRIGGER `+s.p+`t_prot_upd AFTER UPDATE ON `+s.prot+` FOR EACH ROW WHEN (NEW.opid <> OLD.opid) EXECUTE FUNCTION `+s.p+`t_prot_upd()`,
			fn("t_queue_del", protFrom("OLD", "'delete'")+";"),
			fn("t_done_ins", protFrom("NEW", "NEW.kind")+";"),
			`CREATE TRIGGER `+s.p+`t_queue_del AFTER DELETE ON `+s.queue+` FOR EACH ROW EXECUTE FUNCTION `+s.p+`t_queue_del()`,
			`CREATE TRIGGER `+s.p+`t_done_ins AFTER INSERT ON `+s.done+` FOR EACH ROW EXECUTE FUNCTION `+s.p+`t_done_ins()`,
		)
	case fence.MySQL:
		// One statement each (no DELIMITER through database/sql). The clock
		// is read back with a SELECT, which sees this transaction's own
		// update. LAST_INSERT_ID is left alone: fence's MySQL acquire returns
		// the new fence through it, so the events table has no
		// AUTO_INCREMENT column.
		body := func(kind, fenceCol, owner, until, atms, opid string) string {
			if s.binlog {
				// A random key below 2^53 (RAND's precision): among a
				// lease's some 10^5 events a repeat is a one-in-10^6
				// chance, and would fail its statement, not hide it.
				return `BEGIN
	INSERT INTO ` + s.events + ` (lease_name, seq, kind, fence, owner, until_ms, at_ms, opid)
	VALUES (NEW.lease_name, FLOOR(1 + RAND() * 9007199254740990), ` + kind + `, ` + fenceCol + `, ` + owner + `, ` + until + `, ` + atms + `, ` + opid + `);
END`
			}
			return `BEGIN
	DECLARE v BIGINT;
	UPDATE ` + s.clock + ` SET n = n + 1 WHERE lease_name = NEW.lease_name;
	SELECT n INTO v FROM ` + s.clock + ` WHERE lease_name = NEW.lease_name;
	INSERT INTO ` + s.events + ` (lease_name, seq, kind, fence, owner, until_ms, at_ms, opid)
	VALUES (NEW.lease_name, v, ` + kind + `, ` + fenceCol + `, ` + owner + `, ` + until + `, ` + atms + `, ` + opid + `);
END`
		}
		ddl = append(ddl,
			`CREATE TRIGGER `+s.p+`t_lease_ins AFTER INSERT ON `+s.leases+` FOR EACH ROW `+body(insKind, "NEW.fence_token", "NEW.owner_token", "NEW.leased_until_ms", "NEW.acquired_at_ms", "0"),
			`CREATE TRIGGER `+s.p+`t_lease_upd AFTER UPDATE ON `+s.leases+` FOR EACH ROW
BEGIN
	IF `+changed+` THEN `+body(leaseKind, "NEW.fence_token", "NEW.owner_token", "NEW.leased_until_ms", at, "0")+`;
	END IF;
END`,
			`CREATE TRIGGER `+s.p+`t_prot_upd AFTER UPDATE ON `+s.prot+` FOR EACH ROW
BEGIN
	IF NEW.opid <> OLD.opid THEN `+body("NEW.kind", "NEW.fence", "''", "0", "0", "NEW.opid")+`;
	END IF;
END`,
			`CREATE TRIGGER `+s.p+`t_queue_del AFTER DELETE ON `+s.queue+` FOR EACH ROW `+protFrom("OLD", "'delete'"),
			`CREATE TRIGGER `+s.p+`t_done_ins AFTER INSERT ON `+s.done+` FOR EACH ROW `+protFrom("NEW", "NEW.kind"),
		)
	default:
		body := func(kind, fenceCol, owner, until, atms, opid string) string {
			return ` BEGIN
	UPDATE ` + s.clock + ` SET n = n + 1 WHERE lease_name = NEW.lease_name;
	INSERT INTO ` + s.events + ` (lease_name, seq, kind, fence, owner, until_ms, at_ms, opid)
	SELECT NEW.lease_name, n, ` + kind + `, ` + fenceCol + `, ` + owner + `, ` + until + `, ` + atms + `, ` + opid + ` FROM ` + s.clock + ` WHERE lease_name = NEW.lease_name;
END`
		}
		ddl = append(ddl,
			`CREATE TRIGGER `+s.p+`t_lease_ins AFTER INSERT ON `+s.leases+` FOR EACH ROW`+body(insKind, "NEW.fence_token", "NEW.owner_token", "NEW.leased_until_ms", "NEW.acquired_at_ms", "0"),
			`CREATE TRIGGER `+s.p+`t_lease_upd AFTER UPDATE ON `+s.leases+` FOR EACH ROW WHEN `+changed+body(leaseKind, "NEW.fence_token", "NEW.owner_token", "NEW.leased_until_ms", at, "0"),
			`CREATE TRIGGER `+s.p+`t_prot_upd AFTER UPDATE ON `+s.prot+` FOR EACH ROW WHEN NEW.opid <> OLD.opid`+body("NEW.kind", "NEW.fence", "''", "0", "0", "NEW.opid"),
			`CREATE TRIGGER `+s.p+`t_queue_del AFTER DELETE ON `+s.queue+` FOR EACH ROW BEGIN `+protFrom("OLD", "'delete'")+`; END`,
			`CREATE TRIGGER `+s.p+`t_done_ins AFTER INSERT ON `+s.done+` FOR EACH ROW BEGIN `+protFrom("NEW", "NEW.kind")+`; END`,
		)
	}
	return ddl
}

func (s schema) dropDDL() []string {
	tables := []string{s.prot, s.side, s.clock, s.events, s.names, s.queue, s.done, s.snap}
	var out []string
	switch s.d {
	case fence.Postgres:
		out = append(out, "DROP FUNCTION IF EXISTS "+s.p+"t_lease_ins(), "+s.p+"t_lease_upd(), "+s.p+"t_prot_upd(), "+s.p+"t_queue_del(), "+s.p+"t_done_ins(), "+s.p+"t_old_rule_ins(), "+s.p+"t_old_rule_upd() CASCADE")
	default:
		for _, t := range []string{"t_lease_ins", "t_lease_upd", "t_prot_upd", "t_queue_del", "t_done_ins"} {
			out = append(out, "DROP TRIGGER IF EXISTS "+s.p+t)
		}
	}
	for _, t := range tables {
		out = append(out, "DROP TABLE IF EXISTS "+t)
	}
	return out
}

// setup creates the harness tables and one row per lease in each.
func (s schema) setup(ctx context.Context, db *sql.DB, leases []string) error {
	for _, q := range s.createDDL() {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("torture: creating tables: %w\n%s", err, q)
		}
	}
	for _, l := range leases {
		for _, q := range []string{
			"INSERT INTO " + s.prot + " (lease_name, fence, cnt, opid, kind) VALUES (?, 0, 0, 0, '')",
			"INSERT INTO " + s.side + " (lease_name, txcnt) VALUES (?, 0)",
			"INSERT INTO " + s.clock + " (lease_name, n) VALUES (?, 0)",
			"INSERT INTO " + s.names + " (lease_name, alias) VALUES (?, ?)",
		} {
			args := []any{l}
			if strings.Contains(q, s.names) {
				args = append(args, alias(l))
			}
			if _, err := db.ExecContext(ctx, s.q(q), args...); err != nil {
				return fmt.Errorf("torture: seeding tables: %w", err)
			}
		}
	}
	return nil
}

func (s schema) drop(ctx context.Context, db *sql.DB) {
	for _, q := range s.dropDDL() {
		_, _ = db.ExecContext(ctx, q)
	}
}

// writeSQL is the fenced single-statement write: it stores the token's fence
// and the op id in the protected row and bumps the counter, only while the
// token holds the lease ({{fence}}). Unsafe mode runs it without the marker.
func (s schema) writeSQL(fenced bool) string {
	q := "UPDATE " + s.prot + " SET fence = ?, cnt = cnt + 1, opid = ?, kind = ? WHERE lease_name = ?"
	if fenced {
		q += " AND {{fence}}"
	}
	return s.q(q)
}

func (s schema) sideSQL() string {
	return s.q("UPDATE " + s.side + " SET txcnt = txcnt + 1 WHERE lease_name = ?")
}

func (s schema) readSQL() string {
	return s.q("SELECT fence, cnt FROM " + s.prot + " WHERE lease_name = ?")
}

// event is one row of t_events.
type event struct {
	Lease   string
	Seq     int64
	Kind    string
	Fence   int64
	Owner   string
	UntilMs int64
	AtMs    int64
	OpID    int64
}

// eventsSince reads lease's events after seq, in commit order.
func (s schema) eventsSince(ctx context.Context, db *sql.DB, lease string, seq int64) ([]event, error) {
	rows, err := db.QueryContext(ctx, s.q("SELECT lease_name, seq, kind, fence, owner, until_ms, at_ms, opid FROM "+s.events+" WHERE lease_name = ? AND seq > ? ORDER BY seq"), lease, seq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []event
	for rows.Next() {
		var e event
		if err := rows.Scan(&e.Lease, &e.Seq, &e.Kind, &e.Fence, &e.Owner, &e.UntilMs, &e.AtMs, &e.OpID); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s schema) txCount(ctx context.Context, db *sql.DB, lease string) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, s.q("SELECT txcnt FROM "+s.side+" WHERE lease_name = ?"), lease).Scan(&n)
	return n, err
}

// activeSQL counts other sessions still running a statement on this run's
// tables (an orphan of a dropped connection can commit after its client gave
// up). SQLite has none: it runs in process.
func (s schema) activeSQL() string {
	switch s.d {
	case fence.Postgres:
		return `SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state <> 'idle' AND query LIKE '%' || $1 || '%'`
	case fence.MySQL:
		return `SELECT COUNT(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND command <> 'Sleep' AND info LIKE CONCAT('%', ?, '%')`
	}
	return ""
}
