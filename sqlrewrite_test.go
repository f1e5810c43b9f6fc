package fence

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestSplicePositional(t *testing.T) {
	repl := func(int) (string, []any) { return "G(?,?)", []any{"n", "o"} }
	for _, c := range []struct {
		q    string
		args []any
		want string
		out  []any
	}{
		{"UPDATE t SET a = ? WHERE id = ? AND {{fence}}", []any{1, 2}, "UPDATE t SET a = ? WHERE G(?,?) AND ( id = ? AND (1 = 1))", []any{1, "n", "o", 2}},
		{"UPDATE t SET a = ? WHERE {{fence}} AND id = ?", []any{1, 2}, "UPDATE t SET a = ? WHERE G(?,?) AND ( (1 = 1) AND id = ?)", []any{1, "n", "o", 2}},
		{"DELETE FROM t WHERE {{fence}}", nil, "DELETE FROM t WHERE G(?,?) AND ( (1 = 1))", []any{"n", "o"}},
		{"DELETE FROM t WHERE a = ? OR b = ? AND {{fence}} RETURNING ?", []any{1, 2, 3}, "DELETE FROM t WHERE G(?,?) AND ( a = ? OR b = ? AND (1 = 1)) RETURNING ?", []any{"n", "o", 1, 2, 3}},
		{"INSERT INTO t (a, b) SELECT ?, COUNT(*) FROM u WHERE {{fence}} ON CONFLICT (a) DO UPDATE SET b = ?", []any{1, 2}, "INSERT INTO t (a, b) SELECT * FROM (SELECT ?, COUNT(*) FROM u WHERE (1 = 1)) AS fence_src WHERE G(?,?) ON CONFLICT (a) DO UPDATE SET b = ?", []any{1, "n", "o", 2}},
		{"UPDATE t SET a = '?{{fence}}' WHERE {{fence}} AND b = ?", []any{1}, "UPDATE t SET a = '?{{fence}}' WHERE G(?,?) AND ( (1 = 1) AND b = ?)", []any{"n", "o", 1}},
		{"UPDATE t SET a = 'it''s ?' -- ? {{fence}}\n WHERE {{fence}} /* ? */ AND b = ?", []any{1}, "UPDATE t SET a = 'it''s ?' -- ? {{fence}}\n WHERE G(?,?) AND ( (1 = 1) /* ? */ AND b = ?)", []any{"n", "o", 1}},
	} {
		q, out, err := splice(SQLite, c.q, c.args, FenceMarker, 1, repl)
		if err != nil || q != c.want || !reflect.DeepEqual(out, c.out) {
			t.Errorf("%q:\n got %q %v %v\nwant %q %v", c.q, q, out, err, c.want, c.out)
		}
	}
}

func TestSpliceMySQLQuoting(t *testing.T) {
	repl := func(int) (string, []any) { return "G(?)", []any{"x"} }
	q, out, err := splice(MySQL, "UPDATE `t?` SET a = 'a''?\\\\' # ? {{fence}}\nWHERE {{fence}} AND b = ?", []any{1}, FenceMarker, 1, repl)
	if err != nil || q != "UPDATE `t?` SET a = 'a''?\\\\' # ? {{fence}}\nWHERE G(?) AND ( (1 = 1) AND b = ?)" || !reflect.DeepEqual(out, []any{"x", 1}) {
		t.Fatalf("%q %v %v", q, out, err)
	}
}

func TestSpliceNumbered(t *testing.T) {
	repl := func(first int) (string, []any) { return "G($" + itoa(first) + ")", []any{"x"} }
	q, out, err := splice(Postgres, "UPDATE t SET a = $1, b = $$?$$ WHERE {{fence}} AND id = $2 AND c = $tag$ $9 $tag$", []any{1, 2}, FenceMarker, 1, repl)
	if err != nil || q != "UPDATE t SET a = $1, b = $$?$$ WHERE G($3) AND ( (1 = 1) AND id = $2 AND c = $tag$ $9 $tag$)" || !reflect.DeepEqual(out, []any{1, 2, "x"}) {
		t.Fatalf("%q %v %v", q, out, err)
	}
	q, out, err = splice(Postgres, "SET f = {{fence_token}} WHERE f <= {{fence_token}} AND id = $1", []any{5}, TokenMarker, -1, repl)
	if err != nil || q != "SET f = G($2) WHERE f <= G($3) AND id = $1" || !reflect.DeepEqual(out, []any{5, "x", "x"}) {
		t.Fatalf("%q %v %v", q, out, err)
	}
}

func TestSpliceErrors(t *testing.T) {
	repl := func(int) (string, []any) { return "G", nil }
	for _, c := range []struct {
		d    Dialect
		q    string
		args []any
	}{
		{SQLite, "UPDATE t SET a = 1", nil},
		{SQLite, "WHERE {{fence}} AND {{fence}}", nil},
		{SQLite, "WHERE a = ? AND {{fence}}", nil},
		{SQLite, "WHERE a = ?1 AND {{fence}}", []any{1}},
		{SQLite, "WHERE a = 'x AND {{fence}}", nil},
		{SQLite, "WHERE /* a AND {{fence}}", nil},
		{Postgres, "WHERE a = $2 AND {{fence}}", []any{1}},
		{Postgres, "WHERE a = $x$ AND {{fence}}", nil},
	} {
		if _, _, err := splice(c.d, c.q, c.args, FenceMarker, 1, repl); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s %q: %v", c.d, c.q, err)
		}
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

// kinds renders tokens as kind:text for comparison.
func kinds(d Dialect, q string, alt bool) (string, error) {
	toks, err := tokenizeMode(d, q, alt)
	if err != nil {
		return "", err
	}
	var b []string
	for _, t := range toks {
		b = append(b, string("WQSNPMPO"[t.kind])+":"+q[t.pos:t.end])
	}
	return strings.Join(b, " "), nil
}

func TestTokenize(t *testing.T) {
	for _, c := range []struct {
		d    Dialect
		q    string
		want string
	}{
		// PostgreSQL: E'' strings take backslash escapes, comments nest,
		// $ continues a name, dollar quotes, $n.
		{Postgres, `E'a\'b' 'c\' x`, `S:E'a\'b' S:'c\' W:x`},
		{Postgres, "a /* x /* y */ ; */ b", "W:a W:b"},
		{Postgres, "a$b $q$ ; ' $q$ $1", "W:a$b S:$q$ ; ' $q$ P:$1"},
		{Postgres, "x::int ? {{fence}}", "W:x O:: O:: W:int P:? M:{{fence}}"},
		{Postgres, "`a` [1]", "O:` W:a O:` O:[ N:1 O:]"},
		// SQLite: [names], `names`, no nesting of comments, ?.
		{SQLite, "[a'b] `c'd` \"e'f\" /* /* */ g", "Q:[a'b] Q:`c'd` Q:\"e'f\" W:g"},
		{SQLite, "'a\\' ?", "S:'a\\' P:?"},
		// MySQL: backslash escapes, # comments, -- needs a space after it.
		{MySQL, `'a\'b' "c\"d" # x ?` + "\n y", `S:'a\'b' S:"c\"d" W:y`},
		{MySQL, "a --1\n b -- c\n d", "W:a O:- O:- N:1 W:b W:d"},
		{MySQL, "@v := a$b", "O:@ W:v O:: O:= W:a$b"},
	} {
		got, err := kinds(c.d, c.q, false)
		if err != nil || got != c.want {
			t.Errorf("%s %q:\n got %s (%v)\nwant %s", c.d, c.q, got, err, c.want)
		}
	}
}

func TestTokenizeBothModes(t *testing.T) {
	for _, c := range []struct {
		d Dialect
		q string
	}{
		{MySQL, `'a\\' "b\\" 'c''d'`},
		{Postgres, `'a\\' E'b\'c' 'd''e'`},
	} {
		if _, err := tokenize(c.d, c.q); err != nil {
			t.Errorf("%s %q: %v", c.d, c.q, err)
		}
	}
}

func TestTokenizeRefuses(t *testing.T) {
	for _, c := range []struct {
		d    Dialect
		q    string
		want string
	}{
		{Postgres, "a /* /* */", "unterminated"},
		{Postgres, "E'a\\'", "unterminated"},
		{Postgres, "$x$ a", "unterminated"},
		{Postgres, "$0", "out of range"},
		{SQLite, "[a", "unterminated"},
		{SQLite, "a = ?1", "numbered placeholder ?1"},
		{SQLite, "a = :v", "named parameter :v"},
		{SQLite, "a = @v", "named parameter @v"},
		{SQLite, "a = $v", "named parameter $v"},
		{SQLite, "a = $1", "use ?"},
		{MySQL, "a = $1", "use ?"},
		{Postgres, "a = ?0", "numbered placeholder ?0"},
		{MySQL, "a = ?1", "numbered placeholder ?1"},
		{MySQL, "a /*!50000 OR 1 */", "/*!"},
		{MySQL, "a /*M!100000 OR 1 */", "/*!"},
		{MySQL, `'a\'`, "unterminated"},
		// A backslash before a quote reads differently under another sql_mode
		// or standard_conforming_strings; a doubled backslash does not.
		{MySQL, `'a\'b'`, "backslash"},
		{MySQL, `"a\"b"`, "backslash"},
		{Postgres, `'a\' OR x = 'b'`, "backslash"},
	} {
		_, err := tokenize(c.d, c.q)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v (want %q)", c.d, c.q, err, c.want)
		}
	}
}

// Every dialect's shape rules, without a database (the conformance suite
// runs the same shapes on the real servers).
func TestShapes(t *testing.T) {
	ok := []string{
		"UPDATE t SET a = ? WHERE id = ? AND {{fence}}",
		"UPDATE t SET a = ? WHERE {{fence}}",
		"UPDATE t SET a = ? WHERE {{fence}} AND (b = ? OR c = ?)",
		"UPDATE t SET a = ? WHERE NOT b = ? AND c BETWEEN ? AND ? AND {{fence}} AND d IS NOT DISTINCT FROM ?",
		"UPDATE t SET a = CASE WHEN b OR c THEN 1 END WHERE (x OR y) AND {{fence}} RETURNING a",
		"UPDATE t SET a = 1 FROM u WHERE u.id = t.id AND {{fence}};",
		"DELETE FROM t WHERE id IN (SELECT id FROM u WHERE a OR b UNION SELECT 1) AND {{fence}}",
		"INSERT INTO t (a, b) SELECT ?, ? WHERE {{fence}}",
		"INSERT INTO t (a) SELECT a FROM u JOIN v ON u.id = v.id WHERE u.a = ? AND {{fence}} ON CONFLICT (a) DO UPDATE SET a = excluded.a",
		"INSERT INTO t (a) SELECT a FROM u WHERE {{fence}} ON CONFLICT DO NOTHING",
		"INSERT OR REPLACE INTO t (a) SELECT 1 WHERE {{fence}}",
		"REPLACE INTO t (a) SELECT 1 WHERE {{fence}}",
		"WITH q AS (SELECT id FROM u FOR UPDATE) UPDATE t SET a = 1 WHERE id IN (SELECT id FROM q) AND {{fence}}",
		"WITH RECURSIVE q(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM q) DELETE FROM t WHERE id IN (SELECT n FROM q) AND {{fence}}",
		"UPDATE t SET a = 1 WHERE b AND {{fence}} ORDER BY id LIMIT 1",
		// Safe since the guard's place does not depend on the caller's
		// condition: the condition is parenthesised after the guard, or the
		// whole SELECT is wrapped.
		"UPDATE t SET a = 1 WHERE a = 1 OR b = 2 AND {{fence}}",
		"UPDATE t SET a = 1 WHERE {{fence}} AND a OR b",
		"UPDATE t SET a = 1 WHERE ({{fence}})",
		"UPDATE t SET a = 1 WHERE id IN (SELECT id FROM u WHERE {{fence}})",
		"INSERT INTO t (a) SELECT 1 WHERE {{fence}} UNION SELECT 2",
		"INSERT INTO t (a) SELECT 1 INTERSECT SELECT 2 WHERE {{fence}}",
		"INSERT INTO t (n) SELECT COUNT(*) FROM items WHERE {{fence}}",
		"INSERT INTO t (n) SELECT MAX(id) FROM items WHERE {{fence}} GROUP BY v HAVING COUNT(*) > 0",
		"INSERT INTO t (a) WITH q AS (SELECT 1 AS a) SELECT a FROM q WHERE {{fence}}",
		// Keywords as column names: after a dot, or where they are not
		// reserved; the fence does not depend on reading them right.
		"UPDATE t SET a = 1 WHERE t.offset = 1 AND t.limit = 2 AND t.lock = 3 AND t.end = 4 AND {{fence}} OR id > 0",
		"UPDATE t SET a = 1 WHERE x.where = 1 AND {{fence}}",
	}
	for _, q := range ok {
		for _, d := range []Dialect{SQLite, MySQL} {
			if err := shapeOf(d, q); err != nil {
				t.Errorf("%s %q: %v", d, q, err)
			}
		}
	}
	bad := []struct {
		d    Dialect
		q    string
		want string
	}{
		{SQLite, "UPDATE t SET a = 1 WHERE a BETWEEN 1 AND {{fence}}", "BETWEEN"},
		{SQLite, "UPDATE t SET a = 1 WHERE NOT {{fence}}", "stand alone"},
		{SQLite, "UPDATE t SET a = 1 WHERE {{fence}} = 0", "stand alone"},
		{SQLite, "UPDATE t SET a = 1 WHERE a AND {{fence}} COLLATE nocase", "stand alone"},
		{SQLite, "UPDATE t SET a = 1 WHERE a OR {{fence}}", "stand alone"},
		{SQLite, "UPDATE t SET a = 1 WHERE CASE WHEN a THEN {{fence}} ELSE 1 END", "stand alone"},
		{SQLite, "UPDATE t SET a = {{fence}} WHERE id = 1", "WHERE"},
		{SQLite, "UPDATE t SET a = 1 WHERE id = 1 RETURNING {{fence}}", "another clause"},
		{SQLite, "UPDATE t SET a = 1 {{fence}}", "no WHERE"},
		{SQLite, "SELECT 1 WHERE {{fence}}", "SELECT"},
		{SQLite, "WITH q AS (SELECT 1) SELECT 1 WHERE {{fence}}", "SELECT"},
		{Postgres, "MERGE INTO t USING u ON true WHEN MATCHED AND {{fence}} THEN DELETE", "MERGE"},
		{Postgres, "CREATE TABLE x AS SELECT 1 WHERE {{fence}}", "CREATE"},
		{Postgres, "WITH q AS (DELETE FROM u RETURNING id) UPDATE t SET a = 1 WHERE {{fence}}", "DELETE"},
		{Postgres, "WITH q AS (WITH r AS (INSERT INTO u VALUES (1) RETURNING 1) SELECT 1) DELETE FROM t WHERE {{fence}}", "INSERT"},
		{Postgres, "INSERT INTO t WITH q AS (UPDATE u SET a = 1 RETURNING a) SELECT a FROM q WHERE {{fence}}", "UPDATE"},
		{Postgres, "INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 1 WHERE {{fence}}", "SELECT"},
		{Postgres, "INSERT INTO t SELECT 1 ON CONFLICT (a) WHERE {{fence}} DO NOTHING", "another clause"},
		{Postgres, "INSERT INTO t (a) (SELECT 1 WHERE {{fence}})", "without parentheses"},
		{Postgres, "UPDATE t SET a = 1 WHERE CURRENT OF c AND {{fence}}", "CURRENT OF"},
		{MySQL, "INSERT INTO t VALUES (1) ON DUPLICATE KEY UPDATE a = 1 AND {{fence}}", "SELECT"},
		{MySQL, "INSERT INTO t SELECT 1 FROM DUAL WHERE {{fence}}", "target columns"},
		{SQLite, "UPDATE t SET a = 1 WHERE {{fence}}; DELETE FROM t", "one statement"},
		{SQLite, "UPDATE t SET a = 1 WHERE {{fence}} ; ;", "one statement"},
		{SQLite, "UPDATE t SET a = (1 WHERE {{fence}}", "parenthes"},
		// The servers' lexers disagree on these spellings: refused.
		{MySQL, "UPDATE t SET a = 1 WHERE id = 1.0OR 1=1 AND {{fence}}", "glued"},
		{Postgres, "UPDATE t SET a = 1 WHERE id = 1e5OR 1=1 AND {{fence}}", "glued"},
		{Postgres, "UPDATE t SET a = 1 WHERE id = 0x1F AND {{fence}}", "glued"},
		{Postgres, "UPDATE t SET a = 1 WHERE id = 1_000 AND {{fence}}", "glued"},
		{Postgres, "UPDATE t SET a = $1abc WHERE {{fence}}", "glued"},
		{MySQL, "UPDATE t SET a = 1 WHERE id = 1 --\x7f\nOR 1=1 AND {{fence}}", "control character"},
		{MySQL, "UPDATE t SET a = 1 WHERE id = 1 --\x01 x\n AND {{fence}}", "control character"},
		{Postgres, "UPDATE t SET a = 1 WHERE id = 1 -- c\r) OR (1=1\n AND {{fence}}", "control character"},
		{SQLite, "UPDATE t SET a = 1 WHERE id = 1\x0bAND {{fence}}", "control character"},
		{SQLite, "UPDATE t SET a = 1 WHERE id = 1 /* \x00 */ AND {{fence}}", "control character"},
		{SQLite, "UPDATE t SET a = 'x\x00' WHERE {{fence}}", "NUL"},
		{SQLite, "UPDATE t SET a = 'b' WHERE {{fence}} AND 1 = 1[\x00]", "NUL"}, // the oracle's TestSQLiteBoundaries catch
		{SQLite, "UPDATE t SET a = 'b' WHERE {{fence}} AND 1 = 1 /*\x00*/", "U+0000"},
		{SQLite, "UPDATE t SET a = 'b' WHERE {{fence}} AND 1 = 1 -- \x00\n", "U+0000"},
		{Postgres, "UPDATE t SET a = $x$\x00$x$ WHERE {{fence}}", "NUL"},
		{SQLite, "UPDATE t SET a = 1 WHERE \xff AND {{fence}}", "UTF-8"},
		// A client character set such as GBK reads the last byte of 中 and
		// the backslash (or backtick) after it as one character.
		{MySQL, "UPDATE t SET a = '中\\' OR 1=1 -- ' WHERE {{fence}}", "non-ASCII"},
		{Postgres, "UPDATE t SET a = E'中\\' WHERE {{fence}} AND b = 1", "non-ASCII"},
		{MySQL, "UPDATE `表中` SET a = 1 WHERE {{fence}}", "non-ASCII"},
	}
	for _, c := range bad {
		err := shapeOf(c.d, c.q)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v (want %q)", c.d, c.q, err, c.want)
		}
	}
}

// The guard's place is fixed by fence: right after the statement's WHERE,
// with the caller's whole condition in parentheses, or outside the SELECT
// that feeds an INSERT. What the caller's SQL says inside cannot move it.
func TestGuardPlacement(t *testing.T) {
	g := func(first int) (string, []any) { return "G", nil }
	for _, c := range []struct {
		d       Dialect
		q, want string
	}{
		{SQLite, "UPDATE t SET a = 1 WHERE a = 1 OR b = 2 AND {{fence}}",
			"UPDATE t SET a = 1 WHERE G AND ( a = 1 OR b = 2 AND (1 = 1))"},
		{MySQL, "UPDATE t SET a = 1 WHERE a = 1 AND {{fence}} ORDER BY id LIMIT 1",
			"UPDATE t SET a = 1 WHERE G AND ( a = 1 AND (1 = 1)) ORDER BY id LIMIT 1"},
		{Postgres, "DELETE FROM t USING u WHERE u.id = t.id AND {{fence}} RETURNING t.id;",
			"DELETE FROM t USING u WHERE G AND ( u.id = t.id AND (1 = 1)) RETURNING t.id;"},
		{Postgres, "UPDATE t SET a = 1 WHERE t.offset = 1 AND t.end = 2 AND {{fence}} OR id > 0 -- c",
			"UPDATE t SET a = 1 WHERE G AND ( t.offset = 1 AND t.end = 2 AND (1 = 1) OR id > 0) -- c"},
		{Postgres, "INSERT INTO audit (n) SELECT COUNT(*) FROM items WHERE {{fence}}",
			"INSERT INTO audit (n) SELECT COUNT(*) FROM items WHERE (1 = 1) LIMIT CASE WHEN G THEN NULL ELSE 0 END"},
		{Postgres, "INSERT INTO d (a, b) SELECT $1, $2 WHERE {{fence}} UNION SELECT 3, 4 ORDER BY 1 ON CONFLICT DO NOTHING RETURNING a",
			"INSERT INTO d (a, b) SELECT $1, $2 WHERE (1 = 1) UNION SELECT 3, 4 ORDER BY 1 LIMIT CASE WHEN G THEN NULL ELSE 0 END ON CONFLICT DO NOTHING RETURNING a"},
		{Postgres, "INSERT INTO d (a) SELECT a FROM u WHERE {{fence}} ORDER BY a LIMIT 5",
			"INSERT INTO d (a) SELECT * FROM (SELECT a FROM u WHERE (1 = 1) ORDER BY a LIMIT 5) AS fence_src WHERE G"},
		{SQLite, "INSERT INTO d (a, b) SELECT 1, 2 WHERE {{fence}} UNION ALL SELECT 3, 4 ON CONFLICT DO NOTHING",
			"INSERT INTO d (a, b) SELECT * FROM (SELECT 1, 2 WHERE (1 = 1) UNION ALL SELECT 3, 4) AS fence_src WHERE G ON CONFLICT DO NOTHING"},
		{MySQL, "INSERT INTO d (a, b) SELECT ?, ? FROM DUAL WHERE {{fence}} ON DUPLICATE KEY UPDATE b = VALUES(b)",
			"INSERT INTO d (a, b) WITH fence_src (fence_c1, fence_c2) AS (SELECT ?, ? FROM DUAL WHERE (1 = 1)) SELECT * FROM fence_src WHERE G ON DUPLICATE KEY UPDATE b = VALUES(b)"},
		{MySQL, "REPLACE INTO d (a, b, c) SELECT x, COUNT(*), MAX(y) FROM u WHERE {{fence}}",
			"REPLACE INTO d (a, b, c) WITH fence_src (fence_c1, fence_c2, fence_c3) AS (SELECT x, COUNT(*), MAX(y) FROM u WHERE (1 = 1)) SELECT * FROM fence_src WHERE G"},
	} {
		args := make([]any, strings.Count(c.q, "?")+strings.Count(c.q, "$"))
		got, _, err := splice(c.d, c.q, args, FenceMarker, 1, g)
		if err != nil || got != c.want {
			t.Errorf("%s %q:\n got %q (%v)\nwant %q", c.d, c.q, got, err, c.want)
		}
	}
}

func shapeOf(d Dialect, q string) error {
	_, _, err := splice(d, q, make([]any, strings.Count(q, "?")), FenceMarker, 1, func(int) (string, []any) { return "G", nil })
	return err
}

func TestPlaceholders(t *testing.T) {
	repl := func(first int) (string, []any) { return "G($" + itoa(first) + ")", []any{"g"} }
	// ? is rebound to $n on PostgreSQL, outside literals and comments.
	q, out, err := splice(Postgres, "UPDATE t SET a = ? /* ? */ WHERE b = '?' AND c = ? AND {{fence}}", []any{1, 2}, FenceMarker, 1, repl)
	if err != nil || q != "UPDATE t SET a = $1 /* ? */ WHERE G($3) AND ( b = '?' AND c = $2 AND (1 = 1))" || !reflect.DeepEqual(out, []any{1, 2, "g"}) {
		t.Fatalf("%q %v %v", q, out, err)
	}
	for _, c := range []struct {
		d    Dialect
		q    string
		n    int
		want string
	}{
		{Postgres, "UPDATE t SET a = $1 WHERE b = ? AND {{fence}}", 2, "mixes"},
		{Postgres, "UPDATE t SET a = $1 WHERE b = $3 AND {{fence}}", 3, "not $2"},
		{Postgres, "UPDATE t SET a = $1 WHERE b = $2 AND {{fence}}", 3, "3 arguments"},
		{Postgres, "UPDATE t SET a = ? WHERE {{fence}}", 2, "2 arguments"},
		{SQLite, "UPDATE t SET a = ? WHERE {{fence}}", 0, "0 arguments"},
		{MySQL, "UPDATE t SET a = ? WHERE {{fence}}", 2, "2 arguments"},
	} {
		_, _, err := splice(c.d, c.q, make([]any, c.n), FenceMarker, 1, repl)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q with %d args: %v (want %q)", c.d, c.q, c.n, err, c.want)
		}
	}
	// A marker glued to a keyword stays apart from it.
	if q, _, err := splice(SQLite, "UPDATE t SET a = 1 WHERE{{fence}}AND b", nil, FenceMarker, 1, func(int) (string, []any) { return "EXISTS(1)", nil }); err != nil || q != "UPDATE t SET a = 1 WHERE EXISTS(1) AND ((1 = 1)AND b)" {
		t.Errorf("glued marker: %q %v", q, err)
	}
	if got := Rebind(Postgres, "SELECT ? , '?', E'\\'?', $$?$$ -- ?\n, ?"); got != "SELECT $1 , '?', E'\\'?', $$?$$ -- ?\n, $2" {
		t.Errorf("Rebind: %q", got)
	}
}

// BenchmarkSplice: the {{fence}} rewrite of a typical fenced UPDATE, as
// Store.Exec does it on every call (the guard's SQL from the real driver
// shape: text built from the first placeholder number, three arguments).
func BenchmarkSplice(b *testing.B) {
	for _, d := range []Dialect{SQLite, Postgres, MySQL} {
		b.Run(string(d), func(b *testing.B) {
			q := "UPDATE items SET n = n + 1, note = ? WHERE id = ? AND {{fence}}"
			repl := func(first int) (string, []any) {
				if d == Postgres {
					return "EXISTS (SELECT 1 FROM leases WHERE lease_name = $" + strconv.Itoa(first) + " AND owner_token = $" + strconv.Itoa(first+1) + " AND fence_token = $" + strconv.Itoa(first+2) + " FOR SHARE)", []any{"name", "owner", int64(7)}
				}
				return "EXISTS (SELECT 1 FROM leases WHERE lease_name = ? AND owner_token = ? AND fence_token = ?)", []any{"name", "owner", int64(7)}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := splice(d, q, []any{"x", 1}, FenceMarker, 1, repl); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func resetSpliceCache() {
	spliceCache.Lock()
	spliceCache.m = nil
	spliceCache.Unlock()
}

// A query served from the splice cache gives exactly what checking it
// afresh gives: the same SQL and arguments, or the same refusal (refusals
// are never cached, so they always come from the checks themselves).
func TestSpliceCacheSameResult(t *testing.T) {
	resetSpliceCache()
	repl := func(d Dialect) func(int) (string, []any) {
		return func(first int) (string, []any) {
			if d == Postgres {
				return "G($" + strconv.Itoa(first) + ")", []any{"g"}
			}
			return "G(?)", []any{"g"}
		}
	}
	for _, q := range spliceSeeds {
		for _, d := range []Dialect{SQLite, Postgres, MySQL} {
			for _, nargs := range []int{strings.Count(q, "?"), strings.Count(q, "?") + 1} {
				args := make([]any, nargs)
				for i := range args {
					args[i] = i
				}
				s1, a1, e1 := splice(d, q, args, FenceMarker, 1, repl(d))
				s2, a2, e2 := splice(d, q, args, FenceMarker, 1, repl(d))
				if s1 != s2 || !reflect.DeepEqual(a1, a2) || (e1 == nil) != (e2 == nil) || e1 != nil && e1.Error() != e2.Error() {
					t.Errorf("%s %q with %d args: first %q %v %v, cached %q %v %v", d, q, nargs, s1, a1, e1, s2, a2, e2)
				}
			}
		}
	}
}

// The cache stays bounded however many distinct statements go through it,
// and keeps no query longer than spliceCacheMaxLen.
func TestSpliceCacheBounded(t *testing.T) {
	resetSpliceCache()
	defer resetSpliceCache()
	repl := func(int) (string, []any) { return "G(?)", []any{"g"} }
	for i := range 2*spliceCacheMax + 10 {
		q := "UPDATE t SET a = " + strconv.Itoa(i) + " WHERE {{fence}}"
		if _, _, err := splice(SQLite, q, nil, FenceMarker, 1, repl); err != nil {
			t.Fatal(err)
		}
		spliceCache.RLock()
		n := len(spliceCache.m)
		spliceCache.RUnlock()
		if n > spliceCacheMax {
			t.Fatalf("cache holds %d plans, more than %d", n, spliceCacheMax)
		}
	}
	long := "UPDATE t SET a = '" + strings.Repeat("x", spliceCacheMaxLen) + "' WHERE {{fence}}"
	if _, _, err := splice(SQLite, long, nil, FenceMarker, 1, repl); err != nil {
		t.Fatal(err)
	}
	spliceCache.RLock()
	_, kept := spliceCache.m[spliceKey{d: SQLite, marker: FenceMarker, want: 1, query: long}]
	spliceCache.RUnlock()
	if kept {
		t.Error("a query longer than spliceCacheMaxLen was cached")
	}
}
