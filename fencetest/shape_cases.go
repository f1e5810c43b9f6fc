package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencepgx"
)

// The shapes of SQL around {{fence}} that the fenced-write helpers accept,
// and the shapes they refuse (the package doc's table). A refused shape must
// be refused before anything is sent: with a valid token and with a stale
// one the error wraps ErrInvalid and both tables are unchanged. An accepted
// shape must write for the holder and change no row for a stale token.
func shapeCases() []suiteCase {
	return []suiteCase{
		{"FenceShapesRefusedBeforeSending", refusedShapes},
		{"FenceShapesAcceptedAreFenced", acceptedShapes},
		{"CheckTxInsideRolledBackSavepoint", checkTxSavepoint},
		{"KeywordNamedColumns", keywordColumnShapes},
	}
}

// shape is one statement. In q, {T} is the items table (ids 1-3), {D} a
// second table (id, val) that starts empty, and {FROM} is " FROM DUAL" on
// MySQL, which wants a FROM before WHERE, and {INT} casts a parameter to
// an integer on PostgreSQL. ? placeholders are written as $n
// on PostgreSQL unless raw is set.
type shape struct {
	name     string
	dialects string // comma-separated; "" for every dialect
	q        string
	raw      bool
	// args for attempt k (0 for the holder, 1 for the stale token), so
	// inserted keys differ between attempts.
	args func(k int) []any
	// want is a fragment of the refusal's message.
	want string
}

func argsOf(a ...any) func(int) []any { return func(int) []any { return a } }

func (c shape) runsOn(d fence.Dialect) bool {
	if c.dialects == "" {
		return true
	}
	for _, x := range strings.Split(c.dialects, ",") {
		if x == string(d) {
			return true
		}
	}
	return false
}

func (c shape) sql(s *fence.Store, items, done string) string {
	from, cast := "", ""
	switch s.Dialect() {
	case fence.MySQL:
		from = " FROM DUAL"
	case fence.Postgres:
		// A set operation's untyped parameters become text on PostgreSQL.
		cast = "::int"
	}
	q := strings.NewReplacer("{T}", items, "{D}", done, "{FROM}", from, "{INT}", cast).Replace(c.q)
	if c.raw {
		return q
	}
	return sqlf(s, q)
}

var refused = []shape{
	// MySQL runs the body of /*! … */ as SQL.
	{name: "MySQLExecutableComment", dialects: "mysql", q: "UPDATE {T} SET val = ? WHERE id = ? /*!50000 OR 1=1 */ AND {{fence}}", args: argsOf("stale", 1), want: "/*!"},
	// The marker must be a condition of its own, not an operand: it becomes
	// a condition that is always true, so NOT {{fence}} would never write.
	{name: "NegatedMarker", q: "UPDATE {T} SET val = ? WHERE id = ? AND NOT {{fence}}", args: argsOf("stale", 1), want: "stand alone"},
	{name: "MarkerCompared", q: "UPDATE {T} SET val = ? WHERE id = ? AND {{fence}} IS NOT TRUE", args: argsOf("stale", 1), want: "stand alone"},
	{name: "MarkerInCase", q: "UPDATE {T} SET val = ? WHERE CASE WHEN id = ? THEN 1=1 ELSE {{fence}} END", args: argsOf("stale", 1), want: "stand alone"},
	{name: "MarkerAsBetweenBound", dialects: "sqlite,mysql", q: "UPDATE {T} SET val = ? WHERE id BETWEEN ? AND {{fence}}", args: argsOf("stale", 0), want: "BETWEEN"},
	{name: "MarkerInSet", q: "UPDATE {T} SET val = CASE WHEN {{fence}} THEN ? ELSE ? END WHERE id = ?", args: argsOf("a", "stale", 1), want: "WHERE"},
	{name: "NoWhere", q: "DELETE FROM {T} {{fence}}", args: argsOf(), want: "WHERE"},
	// A data-modifying CTE commits whatever the guarded statement does.
	{name: "WritingCTE", dialects: "postgres", q: "WITH q AS (DELETE FROM {T} WHERE id = ? RETURNING id, val) INSERT INTO {D} (id, val) SELECT id, val FROM q WHERE {{fence}}", args: argsOf(1), want: "DELETE"},
	{name: "WritingCTEInsideInsert", dialects: "postgres", q: "INSERT INTO {D} (id, val) WITH q AS (UPDATE {T} SET val = ? WHERE id = ? RETURNING id, val) SELECT id, val FROM q WHERE {{fence}}", args: argsOf("stale", 1), want: "UPDATE"},
	// Upserts: the insert half is unguarded when the marker is in DO UPDATE.
	{name: "UpsertMarkerInDoUpdate", dialects: "sqlite,postgres", q: "INSERT INTO {T} (id, val) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET val = excluded.val WHERE {{fence}}", args: argsOf(4, "stale"), want: "fed by a SELECT"},
	{name: "UpsertMarkerInDuplicateKey", dialects: "mysql", q: "INSERT INTO {T} (id, val) VALUES (?, ?) ON DUPLICATE KEY UPDATE val = IF({{fence}}, VALUES(val), val)", args: argsOf(4, "stale"), want: "fed by a SELECT"},
	{name: "InsertValues", q: "INSERT INTO {D} (id, val) VALUES (?, CASE WHEN {{fence}} THEN 'a' ELSE 'b' END)", args: argsOf(4), want: "fed by a SELECT"},
	// A second statement: SQLite's driver runs both.
	{name: "SecondStatement", q: "UPDATE {T} SET val = ? WHERE id = ? AND {{fence}}; UPDATE {T} SET val = 'stale' WHERE id = 2", args: argsOf("x", 1), want: "one statement"},
	{name: "SecondStatementAfterTrailingSemicolon", q: "UPDATE {T} SET val = ? WHERE id = ? AND {{fence}};;", args: argsOf("x", 1), want: "one statement"},
	{name: "SelectWritesNothing", q: "SELECT id FROM {T} WHERE {{fence}}", args: argsOf(), want: "SELECT"},
	{name: "MarkerTwice", q: "UPDATE {T} SET val = ? WHERE {{fence}} AND id = ? AND {{fence}}", args: argsOf("x", 1), want: "once"},
	// Placeholders and arguments must match; nothing is sent otherwise.
	{name: "TooManyArguments", q: "UPDATE {T} SET val = ? WHERE id = ? AND {{fence}}", args: argsOf("x", 1, 2), want: "argument"},
	{name: "TooFewArguments", q: "UPDATE {T} SET val = ? WHERE id = ? AND {{fence}}", args: argsOf("x"), want: "argument"},
	{name: "NumberedGap", dialects: "postgres", raw: true, q: "UPDATE {T} SET val = $1 WHERE id = $3 AND {{fence}}", args: argsOf("x", 0, 1), want: "$2"},
	{name: "MixedPlaceholderStyles", dialects: "postgres", raw: true, q: "UPDATE {T} SET val = $1 WHERE id = ? AND {{fence}}", args: argsOf("x", 1), want: "mix"},
	{name: "DollarOnQuestionMarkDialect", dialects: "sqlite,mysql", raw: true, q: "UPDATE {T} SET val = $1 WHERE id = $2 AND {{fence}}", args: argsOf("x", 1), want: "use ?"},
	{name: "SQLiteNumberedQuestionMark", dialects: "sqlite", q: "UPDATE {T} SET val = ?1 WHERE id = ?2 AND {{fence}}", args: argsOf("x", 1), want: "numbered placeholder"},
	{name: "SQLiteNamedColon", dialects: "sqlite", q: "UPDATE {T} SET val = :v WHERE id = ? AND {{fence}}", args: argsOf("x", 1), want: ":v"},
	{name: "SQLiteNamedAt", dialects: "sqlite", q: "UPDATE {T} SET val = @v WHERE id = ? AND {{fence}}", args: argsOf("x", 1), want: "@v"},
	{name: "SQLiteNamedDollar", dialects: "sqlite", q: "UPDATE {T} SET val = $v WHERE id = ? AND {{fence}}", args: argsOf("x", 1), want: "$v"},
	// A backslash before a quote would read differently under another
	// sql_mode (MySQL) or standard_conforming_strings (PostgreSQL).
	{name: "BackslashBeforeQuote", dialects: "mysql,postgres", q: "UPDATE {T} SET val = 'C:\\' WHERE id = ? OR 1=1 AND {{fence}} -- '", args: argsOf(1), want: "backslash"},
	// The servers' lexers disagree on these spellings (second review,
	// 2026-12-05): MariaDB reads 1.0OR as a number and OR, and starts a
	// comment at -- followed by any control character; PostgreSQL ends a --
	// comment at a bare carriage return. Each could hide SQL from fence or
	// show it SQL the server never runs: refused.
	{name: "NumberGluedToWord", q: "UPDATE {T} SET val = ? WHERE id = 1.0OR 1=1 AND {{fence}}", args: argsOf("stale"), want: "glued"},
	{name: "HexGluedNumber", q: "UPDATE {T} SET val = ? WHERE id = 0x1 AND {{fence}}", args: argsOf("stale"), want: "glued"},
	{name: "DashDashThenDelete", raw: true, q: "UPDATE {T} SET val = 'stale' WHERE id = 1 --\x7f\n) OR (1=1\n AND {{fence}}", args: argsOf(), want: "control character"},
	{name: "CommentEndsAtCarriageReturn", raw: true, q: "UPDATE {T} SET val = 'stale' WHERE id = 1 -- c\r) OR (1=1\n AND {{fence}}", args: argsOf(), want: "control character"},
	{name: "VerticalTabAsSpace", raw: true, q: "UPDATE {T} SET val = 'stale' WHERE id = 1\vAND {{fence}}", args: argsOf(), want: "control character"},
	{name: "MarkerInUpsertUpdate", dialects: "sqlite,postgres", q: "INSERT INTO {T} (id, val) SELECT ?, ? ON CONFLICT (id) DO UPDATE SET val = excluded.val WHERE {{fence}}", args: argsOf(1, "stale"), want: "another clause"},
	{name: "UnterminatedString", q: "UPDATE {T} SET val = 'x WHERE {{fence}}", args: argsOf(), want: "unterminated"},
	{name: "UnterminatedNestedComment", dialects: "postgres", q: "UPDATE {T} SET val = ? WHERE id = ? /* a /* b */ AND {{fence}}", args: argsOf("x", 1), want: "unterminated"},
}

var accepted = []shape{
	{name: "Update", q: "UPDATE {T} SET val = ? WHERE id = ? AND {{fence}}", args: argsOf("new", 1)},
	{name: "UpdateMarkerFirst", q: "UPDATE {T} SET val = ? WHERE {{fence}} AND id = ?", args: argsOf("new", 1)},
	{name: "UpdateMarkerOnly", q: "UPDATE {T} SET val = ? WHERE {{fence}}", args: argsOf("new")},
	{name: "ParenthesisedOr", q: "UPDATE {T} SET val = ? WHERE (id = ? OR id = ?) AND {{fence}}", args: argsOf("new", 1, 2)},
	{name: "NotAndBetweenBeforeMarker", q: "UPDATE {T} SET val = ? WHERE NOT id = ? AND id BETWEEN ? AND ? AND {{fence}}", args: argsOf("new", 3, 1, 2)},
	{name: "TrailingSemicolon", q: "UPDATE {T} SET val = ? WHERE id = ? AND {{fence}} ; -- done", args: argsOf("new", 1)},
	{name: "LiteralsAndCommentsLookingLikeSQL", raw: true, q: "UPDATE {T} SET val = 'a; OR ? {{fence}}' /* ; OR ? */ WHERE id = ? -- OR ; ?\n AND {{fence}}", args: argsOf(1)},
	{name: "Delete", q: "DELETE FROM {T} WHERE id = ? AND {{fence}}", args: argsOf(1)},
	{name: "InsertSelect", q: "INSERT INTO {D} (id, val) SELECT ?, ?{FROM} WHERE {{fence}}", args: func(k int) []any { return []any{10 + k, "new"} }},
	{name: "InsertSelectFromTable", q: "INSERT INTO {D} (id, val) SELECT id + ?, val FROM {T} WHERE id < ? AND {{fence}}", args: func(k int) []any { return []any{10 * (k + 1), 3} }},
	{name: "UpsertGuardedSelect", dialects: "sqlite,postgres", q: "INSERT INTO {T} (id, val) SELECT ?, ? WHERE {{fence}} ON CONFLICT (id) DO UPDATE SET val = excluded.val", args: func(k int) []any { return []any{1 + 3*k, "new"} }},
	{name: "UpsertGuardedSelectDuplicateKey", dialects: "mysql", q: "INSERT INTO {T} (id, val) SELECT ?, ? FROM DUAL WHERE {{fence}} ON DUPLICATE KEY UPDATE val = VALUES(val)", args: func(k int) []any { return []any{1 + 3*k, "new"} }},
	{name: "ReplaceSelect", dialects: "sqlite,mysql", q: "REPLACE INTO {T} (id, val) SELECT ?, ?{FROM} WHERE {{fence}}", args: func(k int) []any { return []any{1 + 3*k, "new"} }},
	{name: "InsertOrReplaceSelect", dialects: "sqlite", q: "INSERT OR REPLACE INTO {T} (id, val) SELECT ?, ? WHERE {{fence}}", args: func(k int) []any { return []any{1 + 3*k, "new"} }},
	{name: "ReadOnlyCTE", dialects: "sqlite,postgres", q: "WITH ids AS (SELECT id FROM {T} WHERE id = ?) UPDATE {T} SET val = ? WHERE id IN (SELECT id FROM ids) AND {{fence}}", args: argsOf(1, "new")},
	{name: "SubqueryAndNow", q: "UPDATE {T} SET val = ?, fence_token = {{now_ms}} WHERE (id = ? OR id = ?) AND val IN (SELECT val FROM {D} UNION SELECT 'init') AND {{fence}}", args: argsOf("new", 1, 2)},
	{name: "UpdateReturning", dialects: "sqlite,postgres", q: "UPDATE {T} SET val = ? WHERE id = ? AND {{fence}} RETURNING id", args: argsOf("new", 1)},
	{name: "UpdateOrderLimit", dialects: "mysql", q: "UPDATE {T} SET val = ? WHERE id > ? AND {{fence}} ORDER BY id LIMIT 1", args: argsOf("new", 0)},
	// ? works on PostgreSQL too: it is rebound to $n.
	{name: "QuestionMarksOnPostgres", dialects: "postgres", raw: true, q: "UPDATE {T} SET val = ? WHERE id = ? AND {{fence}} AND val <> '?'", args: argsOf("new", 1)},
	{name: "EscapeStringAndNestedComment", dialects: "postgres", raw: true, q: "UPDATE {T} SET val = E'it\\'s ? {{fence}}' /* a /* ; ? */ OR */ WHERE id = $1 AND {{fence}}", args: argsOf(1)},
	{name: "DollarQuotedString", dialects: "postgres", raw: true, q: "UPDATE {T} SET val = $q$ OR ; ? $1 {{fence}} $q$ WHERE id = $1 AND {{fence}}", args: argsOf(1)},
	{name: "BracketAndBacktickIdentifiers", dialects: "sqlite", q: "UPDATE {T} AS [a'b] SET val = ? WHERE [a'b].id = ? AND `a'b`.val <> 'x' AND {{fence}}", args: argsOf("new", 1)},
	{name: "BacktickIdentifiersAndHashComment", dialects: "mysql", q: "UPDATE {T} AS `a'b` SET `val` = ? # ' OR ?\n WHERE `a'b`.id = ? AND val <> 'it''s ?' AND {{fence}}", args: argsOf("new", 1)},
	// Shapes that once let a stale owner write and are now fenced by where
	// fence puts the guard (the front of the WHERE, the caller's condition
	// in parentheses after it; a SELECT feeding an INSERT wrapped whole).
	{name: "TopLevelOrBeforeMarker", q: "UPDATE {T} SET val = ? WHERE id = ? OR id = ? AND {{fence}}", args: argsOf("new", 1, 2)},
	{name: "TopLevelOrAfterMarker", q: "UPDATE {T} SET val = ? WHERE id = ? AND {{fence}} OR id = ?", args: argsOf("new", 2, 1)},
	{name: "OrInsideParenthesesAroundMarker", q: "UPDATE {T} SET val = ? WHERE (id = ? OR id = ? AND {{fence}})", args: argsOf("new", 1, 2)},
	{name: "MySQLXorIsLooserThanAnd", dialects: "mysql", q: "UPDATE {T} SET val = ? WHERE id = ? XOR id = ? AND {{fence}}", args: argsOf("new", 1, 2)},
	{name: "MySQLPipesAreOr", dialects: "mysql", q: "UPDATE {T} SET val = ? WHERE id = ? || id = ? AND {{fence}}", args: argsOf("new", 1, 2)},
	// MySQL's -- starts a comment only before a space: this is 1 - -1 OR 1=1.
	{name: "MySQLDoubleDashWithoutSpace", dialects: "mysql", q: "UPDATE {T} SET val = ? WHERE id = ? --1 OR 1=1\n AND {{fence}}", args: argsOf("new", 1)},
	{name: "MarkerInSubquery", q: "UPDATE {T} SET val = ? WHERE id = ? AND id IN (SELECT id FROM {T} WHERE {{fence}})", args: argsOf("new", 1)},
	{name: "UnionAfterGuardedSelect", q: "INSERT INTO {D} (id, val) SELECT ?{INT}, ?{FROM} WHERE {{fence}} UNION ALL SELECT ?{INT}, ?{FROM}", args: func(k int) []any { return []any{10 + 2*k, "a", 11 + 2*k, "b"} }},
	{name: "UnionBeforeGuardedSelect", q: "INSERT INTO {D} (id, val) SELECT ?{INT}, ?{FROM} UNION ALL SELECT ?{INT}, ?{FROM} WHERE {{fence}}", args: func(k int) []any { return []any{10 + 2*k, "a", 11 + 2*k, "b"} }},
	{name: "ExceptAfterGuardedSelect", dialects: "sqlite,postgres", q: "INSERT INTO {D} (id, val) SELECT ?{INT}, ? WHERE {{fence}} EXCEPT SELECT ?{INT}, ?", args: func(k int) []any { return []any{10 + k, "a", 5, "b"} }},
	// The review's classes (second review, 2026-12-05).
	// An aggregate without GROUP BY makes a row even when its WHERE
	// matches nothing.
	{name: "AggregateFeedingInsert", q: "INSERT INTO {D} (id, val) SELECT COUNT(*) + ?, 'count'{FROM} WHERE {{fence}}", args: func(k int) []any { return []any{100 * (k + 1)} }},
	{name: "MaxFeedingInsert", q: "INSERT INTO {D} (id, val) SELECT COALESCE(MAX(id), 0) + ?, COALESCE(MAX(val), 'max') FROM {T} WHERE id < 0 AND {{fence}}", args: func(k int) []any { return []any{100 * (k + 1)} }},
	{name: "HavingFeedingInsert", dialects: "postgres", q: "INSERT INTO {D} (id, val) SELECT ?, 'having' FROM {T} WHERE {{fence}} HAVING COUNT(*) >= 0", args: func(k int) []any { return []any{100 * (k + 1)} }},
	{name: "EmptyGroupingSetFeedingInsert", dialects: "postgres", q: "INSERT INTO {D} (id, val) SELECT COUNT(*) + ?, 'grouped' FROM {T} WHERE {{fence}} GROUP BY ()", args: func(k int) []any { return []any{100 * (k + 1)} }},
	// Keyword-named columns: qualified (every dialect) and bare where the
	// dialect lets them be.
	{name: "QualifiedKeywordColumnsThenOr", q: "UPDATE {T} SET val = ? WHERE {T}.id = ? AND {{fence}} OR {T}.id > 0", args: argsOf("new", 1)},
}

func shapeTables(t *testing.T, s *fence.Store) (items_, done string) {
	t.Helper()
	items_ = items(t, s)
	done = s.Prefix() + "done"
	h := handleFor(s)
	if _, err := h.exec(ctxT(t), "CREATE TABLE "+done+" (id INT PRIMARY KEY, val VARCHAR(100) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.exec(context.Background(), "DROP TABLE IF EXISTS "+done) })
	return items_, done
}

// resetShapeTables puts back the rows shapeTables started with.
func resetShapeTables(t *testing.T, s *fence.Store, items_, done string) {
	t.Helper()
	h := handleFor(s)
	ctx := ctxT(t)
	for _, q := range []string{"DELETE FROM " + items_, "DELETE FROM " + done} {
		if _, err := h.exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 3; i++ {
		if _, err := h.exec(ctx, sqlf(s, "INSERT INTO "+items_+" (id, val) VALUES (?, ?)"), i, "init"); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshot is every row of both tables, for "nothing changed".
func tablesSnapshot(t *testing.T, s *fence.Store, tables ...string) string {
	t.Helper()
	var b strings.Builder
	for _, tbl := range tables {
		r, err := handleFor(s).query(ctxT(t), "SELECT id, val FROM "+tbl+" ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var id int64
			var v string
			if err := r.Scan(&id, &v); err != nil {
				r.Close()
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s:%d=%s ", tbl, id, v)
		}
		r.Close()
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func refusedShapes(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	it, done := shapeTables(t, s)
	ctx := ctxT(t)
	stale := mustAcquire(t, s, "stale", long)
	if _, err := s.Revoke(ctx, "stale"); err != nil {
		t.Fatal(err)
	}
	held := mustAcquire(t, s, "held", long)
	for _, c := range refused {
		if !c.runsOn(s.Dialect()) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			q := c.sql(s, it, done)
			for _, tok := range []fence.Token{held, stale} {
				before := tablesSnapshot(t, s, it, done)
				n, err := s.Exec(ctx, tok, q, c.args(0)...)
				if !errors.Is(err, fence.ErrInvalid) || n != 0 {
					t.Errorf("fence %d: %q: want ErrInvalid, got n=%d err=%v", tok.Fence, q, n, err)
				} else if !strings.Contains(err.Error(), c.want) {
					t.Errorf("fence %d: %q: the refusal should mention %q: %v", tok.Fence, q, c.want, err)
				}
				if after := tablesSnapshot(t, s, it, done); after != before {
					t.Errorf("fence %d: %q: refused statement changed the tables:\n before %s\n after  %s", tok.Fence, q, before, after)
				}
				if _, _, err := s.Fenced(tok, q, c.args(0)...); !errors.Is(err, fence.ErrInvalid) {
					t.Errorf("Fenced(%q): %v", q, err)
				}
			}
		})
	}
}

func acceptedShapes(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	it, done := shapeTables(t, s)
	ctx := ctxT(t)
	for _, c := range accepted {
		if !c.runsOn(s.Dialect()) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			q := c.sql(s, it, done)
			resetShapeTables(t, s, it, done)
			tok := mustAcquire(t, s, "job-"+c.name, long)
			before := tablesSnapshot(t, s, it, done)
			if n, err := s.Exec(ctx, tok, q, c.args(0)...); err != nil || n == 0 {
				t.Fatalf("holder: %q: n=%d err=%v", q, n, err)
			}
			if tablesSnapshot(t, s, it, done) == before {
				t.Fatalf("holder: %q changed nothing", q)
			}
			if _, err := s.Revoke(ctx, "job-"+c.name); err != nil {
				t.Fatal(err)
			}
			before = tablesSnapshot(t, s, it, done)
			n, err := s.Exec(ctx, tok, q, c.args(1)...)
			if !errors.Is(err, fence.ErrLost) || n != 0 {
				t.Errorf("stale token: %q: want ErrLost, got n=%d err=%v", q, n, err)
			}
			if after := tablesSnapshot(t, s, it, done); after != before {
				t.Errorf("stale token: %q changed the tables:\n before %s\n after  %s", q, before, after)
			}
		})
	}
}

// checkTxSavepoint shows what a savepoint does to CheckTx's lock, on each
// database (CheckTx's doc and the package doc's table say it): PostgreSQL
// refuses CheckTx inside a savepoint (a SAVEPOINT, a pgx nested
// transaction), whose rollback would release the lock. On MariaDB/MySQL,
// where fence cannot see the savepoint, ROLLBACK TO SAVEPOINT releases the
// share lock, a takeover commits while the transaction goes on, and the
// transaction's plain write commits after it; a write through ExecIn with
// {{fence}} in the same transaction is still refused. On SQLite the
// transaction's write lock, which a savepoint rollback keeps, holds the
// takeover off until commit.
func checkTxSavepoint(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	tbl := items(t, s)
	ctx := ctxT(t)
	h := handleFor(s)
	a := mustAcquire(t, s, "job", long)

	if ph, ok := h.(pgxHandle); ok {
		// pgx's nested transactions are savepoints: refused up front.
		tx, err := ph.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		nested, err := tx.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := fencepgx.CheckTx(ctx, s, nested, a); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("fencepgx.CheckTx on a nested pgx transaction: %v", err)
		}
		// The review's case (2026-12-05): CheckTx on the OUTER transaction
		// while the nested one is open put the lock in the savepoint; its
		// rollback released it and the outer transaction committed after a
		// takeover. It is refused now, and nothing can commit.
		if err := fencepgx.CheckTx(ctx, s, tx, a); !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "savepoint") {
			t.Errorf("fencepgx.CheckTx on the outer transaction while a nested one is open: %v", err)
		}
		tx.Rollback(context.WithoutCancel(ctx))
		// After the nested transaction is gone, on a new transaction,
		// CheckTx at the top level holds the lock as before.
		tx2, err := ph.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := fencepgx.CheckTx(ctx, s, tx2, a); err != nil {
			t.Errorf("fencepgx.CheckTx at the top level: %v", err)
		}
		nested2, err := tx2.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		nested2.Rollback(ctx)
		// The lock was taken at the top level: a takeover waits for tx2.
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if _, err := s.Revoke(rctx, "job"); err == nil {
			t.Errorf("a revoke committed while the transaction checked at its top level was open")
		}
		cancel()
		tx2.Rollback(context.WithoutCancel(ctx))
	}

	tx, err := h.begin(ctx, sql.LevelDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.rollback(ctx)
	if _, err := tx.exec(ctx, "SAVEPOINT fence_sp"); err != nil {
		t.Fatal(err)
	}
	if s.Dialect() == fence.Postgres {
		// PostgreSQL: CheckTx sees the savepoint and refuses.
		if err := tx.check(ctx, a); !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "savepoint") {
			t.Fatalf("CheckTx inside a SAVEPOINT: %v", err)
		}
		return
	}
	if err := tx.check(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.exec(ctx, "ROLLBACK TO SAVEPOINT fence_sp"); err != nil {
		t.Fatal(err)
	}

	if s.Dialect() == fence.SQLite {
		// The takeover cannot get the write lock while the transaction is
		// open: it gives up at its deadline however loaded the machine is.
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := s.Revoke(rctx, "job")
		cancel()
		if err == nil {
			t.Fatal("SQLite: a revoke committed while the checked transaction was open")
		}
		if _, err := tx.exec(ctx, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ?"), "A", 1); err != nil {
			t.Fatal(err)
		}
		if err := tx.commit(ctx); err != nil {
			t.Fatal(err)
		}
		takeover(t, s, "job", a)
		return
	}

	// MariaDB/MySQL: the rollback released the share lock, so the takeover
	// does not wait for the transaction (fence cannot see the savepoint).
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = s.Revoke(rctx, "job")
	cancel()
	if err != nil {
		t.Fatalf("%s: revoke after ROLLBACK TO SAVEPOINT: %v (if it now waits, the server keeps the lock: update CheckTx's doc)", s.Dialect(), err)
	}
	bt := mustAcquire(t, s, "job", long)
	// A fenced write in the same transaction is still refused...
	if _, err := tx.fencedExec(ctx, a, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ? AND {{fence}}"), "A-fenced", 2); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("ExecIn after the savepoint rollback: %v", err)
	}
	// ...but a plain write after CheckTx commits after the takeover.
	if _, err := tx.exec(ctx, sqlf(s, "UPDATE "+tbl+" SET val = ? WHERE id = ?"), "A-unfenced", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v := val(t, s, tbl, 1); v != "A-unfenced" || val(t, s, tbl, 2) != "init" {
		t.Fatalf("rows after the stale transaction: %q %q", v, val(t, s, tbl, 2))
	}
	t.Logf("%s: CheckTx's lock was released by ROLLBACK TO SAVEPOINT: fence %d took over, then fence %d's unfenced write committed", s.Dialect(), bt.Fence, a.Fence)
}
