package fence

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// Hostile names: SQL injection attempts, quoting, NUL, huge input.
var hostile = []string{
	"admin:reconciliation", "'; DROP TABLE fence_leases; --", `" OR 1=1 --`, "`x`", "a\x00b",
	"{{fence}}", "$1", "?", "job#7@" + strings.Repeat("a", 32), "\u202e", "\xff\xfe",
	strings.Repeat("x", 192), "fence_; DELETE FROM fence_runs", "/* */", "\\", "%_",
}

func FuzzParseToken(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
		f.Add(s + "#1@" + strings.Repeat("0", 32))
	}
	f.Fuzz(func(t *testing.T, s string) {
		tk, err := ParseToken(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			return
		}
		if tk.String() != s {
			t.Fatalf("round trip %q -> %+v -> %q", s, tk, tk.String())
		}
		if validateToken(tk) != nil {
			t.Fatalf("parsed an invalid token %+v", tk)
		}
	})
}

func FuzzValidateName(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateName(s)
		ok := s != "" && len(s) <= MaxNameLen && utf8.ValidString(s) &&
			!strings.ContainsFunc(s, func(r rune) bool {
				return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
			})
		if ok != (err == nil) {
			t.Fatalf("ValidateName(%q) = %v", s, err)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || len(err.Error()) > 300) {
			t.Fatalf("bad error for %q: %v", s, err)
		}
	})
}

func FuzzValidatePrefix(f *testing.F) {
	for _, s := range append(hostile, "fence_", "_", "A1", "x y", "t;", "1abc") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidatePrefix(s) != nil {
			return
		}
		// An accepted prefix is a plain identifier: nothing that could end,
		// quote or comment a statement.
		for _, c := range s {
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				t.Fatalf("accepted prefix %q with %q", s, c)
			}
		}
	})
}

// spliceSeeds are shapes fence must refuse or accept; the corpus in
// testdata/fuzz/FuzzSplice holds more.
var spliceSeeds = []string{
	"UPDATE t SET a = ? WHERE id = ? AND {{fence}}",
	"UPDATE t SET a = $1 WHERE {{fence}} AND b = $2",
	"UPDATE t SET a = '{{fence}}?' WHERE {{fence}} -- ?",
	"UPDATE t SET a = $$ $1 $$ WHERE {{fence}}",
	"UPDATE t SET a = ? WHERE id = ? OR id = ? AND {{fence}}",
	"UPDATE t SET a = ? WHERE (id = ? OR id = ?) AND {{fence}}",
	"WITH q AS (DELETE FROM u RETURNING id) INSERT INTO t SELECT id FROM q WHERE {{fence}}",
	"INSERT INTO t VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET a = excluded.a WHERE {{fence}}",
	"INSERT INTO t SELECT ?, ? WHERE {{fence}} ON CONFLICT (id) DO UPDATE SET a = excluded.a",
	"UPDATE t SET a = ? WHERE id = ? AND {{fence}}; UPDATE u SET a = 1",
	"INSERT INTO t SELECT ? WHERE {{fence}} UNION SELECT ?",
	"UPDATE t SET a = E'\\' OR 1=1 --' WHERE id = ? AND {{fence}}",
	"UPDATE t SET a = 1 /* /* */ OR 1=1 */ WHERE {{fence}}",
	"UPDATE [t'] SET a = ? WHERE `b'` = ? AND {{fence}}",
	"UPDATE t SET a = ?1 WHERE b = :b AND c = @c AND d = $d AND {{fence}}",
	"UPDATE t SET a = ? WHERE b = ? --1 OR 1=1\n AND {{fence}}",
	"UPDATE t SET a = ? WHERE b = ? /*!50000 OR 1=1 */ AND {{fence}}",
	"UPDATE t SET a = ? WHERE b BETWEEN ? AND {{fence}}",
	"UPDATE t SET a = ? WHERE CASE WHEN b THEN 1 ELSE {{fence}} END",
	"UPDATE t SET a = ? WHERE NOT {{fence}}",
}

// FuzzSplice: whatever the input, the rewrite either refuses it with
// ErrInvalid or returns one statement with exactly one guard, at the top
// level of its WHERE, and as many placeholders as arguments.
func FuzzSplice(f *testing.F) {
	for i, q := range spliceSeeds {
		f.Add(q, strings.Count(q, "?"), uint8(i%3))
	}
	dialects := []Dialect{SQLite, Postgres, MySQL}
	f.Fuzz(func(t *testing.T, q string, nargs int, dialect uint8) {
		if nargs < 0 || nargs > 20 {
			return
		}
		d := dialects[int(dialect)%len(dialects)]
		args := make([]any, nargs)
		for i := range args {
			args[i] = i
		}
		const guard = "GUARD"
		out, all, err := splice(d, q, args, FenceMarker, 1, func(first int) (string, []any) {
			if d == Postgres {
				return guard + "($" + strconv.Itoa(first) + ")", []any{"g"}
			}
			return guard + "(?)", []any{"g"}
		})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			return
		}
		if len(all) != nargs+1 {
			t.Fatalf("splice(%q) = %q with %d args for %d", q, out, len(all), nargs)
		}
		toks, err := tokenize(d, out)
		if err != nil {
			t.Fatalf("output %q does not tokenize: %v", out, err)
		}
		depth, guards, params, maxN := 0, 0, 0, 0
		for i, tk := range toks {
			switch {
			case tk.kind == tPunct && tk.word == "(":
				depth++
			case tk.kind == tPunct && tk.word == ")":
				depth--
			case tk.kind == tPunct && tk.word == ";" && i != len(toks)-1:
				t.Fatalf("accepted two statements: %q", q)
			case tk.kind == tMarker:
				t.Fatalf("marker left in %q", out)
			case tk.kind == tWord && tk.word == guard:
				guards++
				if depth != 0 {
					t.Fatalf("guard nested in %q", out)
				}
			case tk.kind == tParam:
				params++
				maxN = max(maxN, tk.n)
			}
		}
		if guards != 1 {
			t.Fatalf("%d guards in %q", guards, out)
		}
		if d == Postgres && maxN != len(all) || d != Postgres && params != len(all) {
			t.Fatalf("%q has %d placeholders (max $%d) for %d arguments", out, params, maxN, len(all))
		}
	})
}
