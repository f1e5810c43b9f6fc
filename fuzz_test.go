package fence

import (
	"errors"
	"strings"
	"testing"
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
			!strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
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

func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{
		"sqlite:fence.db", "sqlite::memory:", "postgres://u:pw@h:5432/db?sslmode=disable",
		"mysql://root:pw@127.0.0.1:3306/test?x=1", "postgresql://h/db?password=pw", "mysql://u:p@w@h/db",
		"postgres://u:pw@[::1/db", "mysql://h", "oracle://x", "", "sqlite:", "postgres://%zz@h/db",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDSN(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			if d.password != "" && strings.Contains(err.Error(), d.password) {
				t.Fatalf("error shows password: %v", err)
			}
			return
		}
		if d.password != "" && len(d.password) > 3 && strings.Contains(d.Redacted, d.password) {
			t.Fatalf("redacted DSN %q shows password %q", d.Redacted, d.password)
		}
		switch d.Dialect {
		case SQLite, Postgres, MySQL:
		default:
			t.Fatalf("dialect %q", d.Dialect)
		}
	})
}

func FuzzSplice(f *testing.F) {
	f.Add("UPDATE t SET a = ? WHERE id = ? AND {{fence}}", 2, false)
	f.Add("UPDATE t SET a = $1 WHERE {{fence}} AND b = $2", 2, true)
	f.Add("UPDATE t SET a = '{{fence}}?' WHERE {{fence}} -- ?", 0, false)
	f.Add("UPDATE t SET a = $$ $1 $$ WHERE {{fence}}", 0, true)
	f.Fuzz(func(t *testing.T, q string, nargs int, dollar bool) {
		if nargs < 0 || nargs > 20 {
			return
		}
		d := SQLite
		if dollar {
			d = Postgres
		}
		args := make([]any, nargs)
		for i := range args {
			args[i] = i
		}
		out, all, err := splice(d, q, args, FenceMarker, 1, func(first int) (string, []any) {
			if dollar {
				return "G($" + strings.Repeat("9", 0) + itoa(first%10) + ")", []any{"g"}
			}
			return "G(?)", []any{"g"}
		})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			return
		}
		if len(all) != nargs+1 || len(out) < len(q)-len(FenceMarker) {
			t.Fatalf("splice(%q) = %q %v", q, out, all)
		}
	})
}
