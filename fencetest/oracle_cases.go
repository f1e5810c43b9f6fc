package fencetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencekit/fence"
)

// The statements the oracle fuzzer (internal/sqloracle, issue 27) caught
// on the code before the guard was placed by fence: accepted by the
// checker, run by a stale owner, they wrote rows on the real server. Each is
// kept here as the fuzzer minimised it (hostile spellings it did not need
// put back to plain ones), per dialect. Whatever fence does with it now, a
// stale owner must change nothing; where fence accepts it, the holder's
// run must write (the statement is a real write, not a no-op that proves
// nothing). The catches that need a handle of their own (PostgreSQL's
// simple protocol, MySQL's multiStatements) are internal/sqloracle's
// TestCaught.
func oracleCases() []suiteCase {
	return []suiteCase{{"OracleCatches", oracleCatches}}
}

// oracleCatch is one caught statement. In q, {I} is a table of rows 1-5
// and {S} one of rows 1 and 2, both (id, val, n) and columns named offset,
// fetch, from, window, for, returning, lock, end and limit.
type oracleCatch struct {
	name     string
	dialects string // comma-separated; "" for every dialect
	q        string
	args     []any
	// session runs in the transaction before the statement (a setting the
	// catch needs); reset runs before the rollback, for settings that
	// outlive a transaction (MySQL's).
	session, reset []string
}

var caughtStatements = []oracleCatch{
	// Aggregates: one row whatever the WHERE matches, so the guard in it
	// did not stop the insert (all three databases).
	{name: "AggregateFeedingInsert", q: "INSERT INTO {S} (id, val, n) SELECT COALESCE(MAX(a.id), 0) + 100, 'agg', COUNT(*) FROM {I} AS a WHERE {{fence}}"},
	{name: "HavingFeedingInsert", q: "INSERT INTO {S} (id, val, n) SELECT COALESCE(MAX(a.id), 0) + 100, 'agg', COUNT(*) FROM {I} AS a WHERE {{fence}} HAVING COUNT(*) >= 0"},
	{name: "EmptyGroupingSetFeedingInsert", dialects: "postgres", q: "INSERT INTO {S} (id, val, n) SELECT COALESCE(MAX(a.id), 0) + 100, 'agg', COUNT(*) FROM {I} AS a WHERE {{fence}} GROUP BY ()"},
	{name: "AggregateFeedingUpsert", dialects: "sqlite,postgres", q: "INSERT INTO {S} (id, val, n) SELECT COALESCE(MAX(a.id), 1), 'agg', COUNT(*) FROM {I} AS a WHERE {{fence}} ON CONFLICT (id) DO UPDATE SET n = {S}.n + 1"},
	{name: "AggregateFeedingDuplicateKeyUpdate", dialects: "mysql", q: "INSERT INTO {S} (id, val, n) SELECT COALESCE(MAX(a.id), 1), 'agg', COUNT(*) FROM {I} AS a WHERE {{fence}} ON DUPLICATE KEY UPDATE n = {S}.n + 1"},
	{name: "AggregateFeedingReplace", dialects: "sqlite,mysql", q: "REPLACE INTO {S} (id, val, n) SELECT COALESCE(MAX(a.id), 1), 'agg', COUNT(*) FROM {I} AS a WHERE {{fence}}"},

	// Keyword-named columns and aliases that the checker read as the
	// clause they name: it ended the WHERE there and missed the OR after.
	{name: "OffsetColumnBeforeOr", dialects: "sqlite,mysql", q: "UPDATE {I} AS a SET n = a.n + 1 WHERE {{fence}} AND a.offset > 0 OR 1 = 1"},
	{name: "WindowColumnBeforeOr", dialects: "sqlite", q: "DELETE FROM {I} AS a WHERE {{fence}} AND a.window > 0 OR id > 0"},
	{name: "OffsetAliasBeforeOr", dialects: "sqlite", q: "DELETE FROM {I} AS offset WHERE {{fence}} AND offset.n > 0 OR TRUE"},
	{name: "ForAliasBeforeOr", dialects: "sqlite", q: "INSERT INTO {S} (id, val, n) SELECT for.id + 100, 'init', for.n FROM {I} AS for WHERE {{fence}} AND for.id > 0 OR TRUE"},
	{name: "ReturningColumnBeforeOr", dialects: "mysql", q: "UPDATE {I} AS a SET val = 'v1' WHERE {{fence}} AND a.returning IS NOT NULL OR 1 = 1"},
	{name: "OffsetColumnFeedingReplace", dialects: "mysql", q: "REPLACE INTO {S} (id, val, n) SELECT DISTINCT a.n, 'd', a.n FROM {I} a WHERE {{fence}} AND a.offset >= 0 OR TRUE"},
	{name: "FetchColumnBeforeOr", dialects: "postgres", q: "DELETE FROM {I} AS a WHERE {{fence}} AND a.fetch IS NOT NULL OR 1=1"},
	{name: "FromColumnInUpdateFrom", dialects: "postgres", q: "UPDATE {I} a SET val = ? FROM {S} AS d WHERE d.id = a.id AND {{fence}} AND a.from >= 0 OR 1 = 1", args: []any{"p"}},
	{name: "LimitColumnFeedingUpsert", dialects: "postgres", q: "INSERT INTO {S} (id, val, n) SELECT DISTINCT n, 'd', n FROM {I} a WHERE {{fence}} AND a.limit >= 0 OR 1=1 ON CONFLICT (id) DO UPDATE SET val = EXCLUDED.val"},
	{name: "ValuesAliasBeforeOr", dialects: "postgres", q: "UPDATE {I} AS VaLUEs SET n = n + 1 WHERE {{fence}} AND VaLUEs.id > 0 OR id > 0"},
	{name: "ReturningColumnBeforeOrPostgres", dialects: "postgres", q: "DELETE FROM {I} WHERE {{fence}} AND {I}.returning > 0 OR id > 0"},

	// MariaDB reads a number glued to a word as the number, then the word.
	{name: "GluedExponentOr", dialects: "mysql", q: "DELETE FROM {I} WHERE {{fence}} AND {I}.id > 1e-1Or TRUE"},
	{name: "GluedDecimalOr", dialects: "mysql", q: "UPDATE {I} SET n = n + 1 WHERE {{fence}} AND id > 1.0or id > 0"},
	{name: "GluedFractionOr", dialects: "mysql", q: "UPDATE {I} AS a SET a.n = 7 WHERE {{fence}} AND a.id > .5or 1=1"},
	{name: "GluedExponentXor", dialects: "mysql", q: "INSERT INTO {S} (id, val, n) SELECT a.id + 100, 'init', a.n FROM {I} AS a WHERE {{fence}} AND a.id > 1E1XOR TRUE"},
	{name: "GluedOrBeforeMarkerInJoin", dialects: "mysql", q: "UPDATE {I} AS a JOIN {S} AS d ON d.id = a.id SET a.n = a.n + 1 WHERE a.id > 1.0or TRUE AND {{fence}}"},

	// PostgreSQL ends a -- comment at a bare carriage return.
	{name: "CarriageReturnEndsComment", dialects: "postgres", q: "DELETE FROM {I} WHERE 1=1 --\x05 \"\r or 1=1\n AND {{fence}}"},
	{name: "CarriageReturnEndsCommentInUpsert", dialects: "postgres", q: "INSERT INTO {S} (id, val, n) SELECT id, val, n FROM {I} AS a WHERE {{fence}} AND 1=1 --- x\r or TRUE\n ON CONFLICT (id) DO UPDATE SET val = 'u' WHERE {S}.n < 100"},
	// Under client_encoding GBK, SJIS or BIG5 (a SET in the caller's
	// session), 0xAC 0x5C, 0x95 0x5C and 0xEC 0x5C are one character: the
	// E'…' string ends at the quote fence took for an escaped one.
	{name: "GBKEscapeString", dialects: "postgres", q: "UPDATE {I} AS a SET n = 1 WHERE {{fence}} AND a.val <> E'\xac\\' OR 1=1 -- '",
		session: []string{"SET client_encoding = 'GBK'"}},
	{name: "SJISEscapeString", dialects: "postgres", q: "DELETE FROM {I} AS a WHERE {{fence}} AND val <> E'\x95\\' OR 1=1 -- '",
		session: []string{"SET client_encoding = 'SJIS'"}},
	{name: "BIG5EscapeStringFeedingInsert", dialects: "postgres", q: "INSERT INTO {S} (id, val, n) SELECT a.id + 100, 'x', a.n FROM {I} AS a WHERE {{fence}} AND a.val <> E'\xec\\' OR 1=1 -- '",
		session: []string{"SET client_encoding = 'BIG5'"}},

	// The same with valid UTF-8 (caught on the rewrite of c8817c0/5704f85,
	// which refuses text that is not UTF-8 and a session whose encoding it
	// sees, but not a SET in the caller's transaction): ¬中 is C2 AC E4 B8
	// AD, which Big5 reads as C2 AC, E4 B8, then AD with the backslash; GBK
	// pairs 中 the same way. The ) closes the parenthesis the rewrite puts
	// around the caller's condition, and -- hides the one it adds after.
	{name: "BIG5EscapeStringUTF8ClosingParen", dialects: "postgres", q: "UPDATE {I} AS a SET n = 1 WHERE {{fence}} AND a.val <> E'¬中\\') OR 1=1 -- '",
		session: []string{"SET client_encoding = 'BIG5'"}},
	{name: "GBKEscapeStringUTF8ClosingParen", dialects: "postgres", q: "UPDATE {I} AS a SET n = 1 WHERE {{fence}} AND a.val <> E'中\\') OR 1=1 -- '",
		session: []string{"SET client_encoding = 'GBK'"}},

	// MariaDB, SET NAMES gbk or cp932 in the caller's transaction (the
	// rewrite checks the character set when the store opens, not in the
	// caller's session): '中\\' is a literal to fence, but GBK reads AD 5C
	// as one character and the escaped quote after it runs the literal on
	// to the next quote; then ) OR 1=1 closes the rewrite's parenthesis.
	{name: "GBKSwallowingLiteralClosingParen", dialects: "mysql", q: "UPDATE {I} SET n = 1 WHERE val <> '中\\\\' AND {{fence}} AND val <> ') OR 1=1 -- '",
		session: []string{"SET NAMES gbk"}, reset: []string{"SET NAMES utf8mb4"}},
	{name: "GBKSwallowingLiteralInDelete", dialects: "mysql", q: "DELETE FROM {I} WHERE {I}.val <> '文\\\\' AND {{fence}} AND val <> ') OR 1=1 -- '",
		session: []string{"SET NAMES gbk"}, reset: []string{"SET NAMES utf8mb4"}},
	{name: "CP932SwallowingLiteralClosingParen", dialects: "mysql", q: "UPDATE {I} SET n = 1 WHERE val <> '文\\\\' AND {{fence}} AND val <> ') OR 1=1 -- '",
		session: []string{"SET NAMES cp932"}, reset: []string{"SET NAMES utf8mb4"}},

	// SQLite reads the SQL as a C string: it stops at a NUL that fence
	// reads past, in space, a block comment or a line comment.
	{name: "NULInSpace", dialects: "sqlite", q: "UPDATE {I} AS a SET n = 3 WHERE 1=1 \x00 AND {{fence}}"},
	{name: "NULInBlockComment", dialects: "sqlite", q: "DELETE FROM {I} WHERE 1=1 /* \x00 */ AND {{fence}}"},
	{name: "NULInLineComment", dialects: "sqlite", q: "DELETE FROM {I} -- ?\x00\nAS a WHERE {{fence}}"},
	// TestSQLiteBoundaries' catch on the rewrite (seed 2704992498 soup
	// 38544): a NUL inside a [ quoted name was taken as part of the name
	// while SQLite stopped reading there. The guard's parenthesis left the
	// cut text unbalanced, so SQLite refused it (it failed closed, the
	// placement's point), but fence and SQLite read different statements.
	{name: "NULInBracketName", dialects: "sqlite", q: "DELETE FROM {I} WHERE 1=1 OR [\x00] IS NULL AND {{fence}}"},
}

func (c oracleCatch) runsOn(d fence.Dialect) bool {
	return c.dialects == "" || strings.Contains(","+c.dialects+",", ","+string(d)+",")
}

// oracleCatchColumns are the keyword-named columns of the tables.
var oracleCatchColumns = []string{"offset", "fetch", "from", "window", "for", "returning", "lock", "end", "limit"}

func oracleCatches(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	h := handleFor(s)
	d := s.Dialect()
	quote := func(n string) string {
		if d == fence.MySQL {
			return "`" + n + "`"
		}
		return `"` + n + `"`
	}
	items, sink := s.Prefix()+"oi", s.Prefix()+"os"
	var cols, digestCols []string
	for _, c := range oracleCatchColumns {
		cols = append(cols, quote(c)+" INT NOT NULL DEFAULT 1")
		digestCols = append(digestCols, quote(c))
	}
	for _, tbl := range []string{items, sink} {
		if _, err := h.exec(ctx, "CREATE TABLE "+tbl+" (id INT PRIMARY KEY, val VARCHAR(100) NOT NULL, n INT NOT NULL, "+strings.Join(cols, ", ")+")"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.exec(context.Background(), "DROP TABLE IF EXISTS "+tbl) })
	}
	for i := 1; i <= 5; i++ {
		if _, err := h.exec(ctx, sqlf(s, "INSERT INTO "+items+" (id, val, n) VALUES (?, ?, ?)"), i, "v"+string(rune('0'+i)), i); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 2; i++ {
		if _, err := h.exec(ctx, sqlf(s, "INSERT INTO "+sink+" (id, val, n) VALUES (?, ?, 0)"), i, "d"+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	// digests are reads of one row each that change with any row of the
	// table.
	var digests []string
	all := append([]string{"id", "val", "n"}, digestCols...)
	for _, tbl := range []string{items, sink} {
		switch d {
		case fence.Postgres:
			digests = append(digests, "SELECT COUNT(*)::text || '|' || COALESCE(string_agg(x::text, ',' ORDER BY x.id), '') FROM "+tbl+" AS x")
		case fence.MySQL:
			digests = append(digests, "SELECT CONCAT(COUNT(*), '|', COALESCE(GROUP_CONCAT(CONCAT_WS(':', "+strings.Join(all, ", ")+") ORDER BY id SEPARATOR ','), '')) FROM "+tbl)
		default:
			digests = append(digests, "SELECT COUNT(*) || '|' || COALESCE(group_concat(r, ','), '') FROM (SELECT "+strings.Join(all, " || ':' || ")+" AS r FROM "+tbl+" ORDER BY id)")
		}
	}
	snapshot := func(tx txHandle) (string, error) {
		var out []string
		for _, q := range digests {
			var v string
			if err := tx.queryRow(ctx, q).Scan(&v); err != nil {
				return "", err
			}
			out = append(out, v)
		}
		return strings.Join(out, " / "), nil
	}

	stale := mustAcquire(t, s, "oracle", long)
	if _, err := s.Revoke(ctx, "oracle"); err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, s, "oracle", long)

	// run runs q with tok in a transaction that is rolled back, and says
	// whether the tables changed inside it.
	run := func(t *testing.T, c oracleCatch, q string, tok fence.Token) (n int64, changed bool, diff string, err error) {
		t.Helper()
		tx, err := h.begin(ctx, sql.LevelDefault)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.rollback(context.WithoutCancel(ctx))
		for _, st := range c.session {
			if _, err := tx.exec(ctx, st); err != nil {
				t.Fatalf("%s: %v", st, err)
			}
		}
		before, err := snapshot(tx)
		if err != nil {
			t.Fatal(err)
		}
		n, err = tx.fencedExec(ctx, tok, q, c.args...)
		after, serr := snapshot(tx)
		for _, st := range c.reset {
			tx.exec(ctx, st)
		}
		if serr != nil {
			if err != nil && d == fence.Postgres {
				// The statement failed and aborted the transaction:
				// nothing of it can commit.
				return n, false, "", err
			}
			t.Fatalf("reading the tables after the statement: %v", serr)
		}
		return n, before != after, before + "\n  after:  " + after, err
	}

	accepted := 0
	for _, c := range caughtStatements {
		if !c.runsOn(d) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			q := strings.NewReplacer("{I}", items, "{S}", sink).Replace(c.q)
			if d == fence.Postgres {
				// Byte by byte: sqlf would turn bytes that are not UTF-8
				// into U+FFFD, another statement.
				var b strings.Builder
				for i, k := 0, 1; i < len(q); i++ {
					if q[i] == '?' {
						fmt.Fprintf(&b, "$%d", k)
						k++
						continue
					}
					b.WriteByte(q[i])
				}
				q = b.String()
			}
			n, changed, diff, err := run(t, c, q, stale)
			if errors.Is(err, fence.ErrInvalid) {
				if n, _, _, err := run(t, c, q, holder); !errors.Is(err, fence.ErrInvalid) || n != 0 {
					t.Errorf("refused for a stale token but not for the holder: n=%d err=%v", n, err)
				}
				t.Logf("refused: %v", err)
				return
			}
			if changed || err == nil || n != 0 {
				t.Errorf("stale owner: %q: n=%d err=%v, tables changed: %v\n  before: %s", q, n, err, changed, diff)
			}
			accepted++
			n, changed, diff, err = run(t, c, q, holder)
			if !changed {
				t.Errorf("holder: %q wrote nothing (n=%d err=%v): an accepted catch must be a real write\n  before: %s", q, n, err, diff)
			}
		})
	}
	t.Logf("%s: %d catches accepted by fence, the others refused", d, accepted)
}
