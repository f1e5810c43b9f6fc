package fencedsn

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencekit/fence"
)

// dsnSeeds are DSNs whose secrets leaked before: passwords with '#', '?',
// '/', '@', ':' and '%' (postgres://app2:2024#Summer@… printed whole,
// Xy7#… leaked ":Xy7" in "invalid port"), secret parameters, and shapes
// on which pgx and net/url disagree.
var dsnSeeds = []string{
	"sqlite:db", "sqlite::memory:", "postgres://u:pw@h:5432/db?sslmode=disable",
	"mysql://root:pw@127.0.0.1:3306/test?x=1", "postgresql://h/db?password=pw", "mysql://u:p@w@h/db",
	"postgres://u:pw@[::1/db", "mysql://h", "oracle://x", "", "sqlite:", "postgres://%zz@h/db",
	"postgres://app2:2024#Summer@127.0.0.1:25432/h3?sslmode=disable",
	"postgres://app:Xy7#kLm9@db.internal:5432/app",
	"postgres://app:Xy7/kLm9@db.internal:5432/app",
	"postgres://app:Xy7?kLm9@db.internal/app",
	"postgres://app:Xy7@kLm9@db.internal/app",
	"postgres://app:Xy7:kLm9@db.internal/app",
	"postgres://app:Xy7%kLm9@db.internal/app",
	"postgres://app:1234/kLm9@db.internal/app",
	"mysql://app:Xy7#kLm9@127.0.0.1:3306/test",
	"mysql://app:Xy7/kLm9@127.0.0.1:3306/test",
	"mysql://app:a#b?c/d@e:f%g@127.0.0.1:3306/test",
	"postgres://h/db?sslpassword=Xy7kLm9&sslkey=/k.pem&sslmode=verify-full",
	"mysql://u@h/db?password=PASSWORD('x')",
	"postgres://h1:5432,h2:5433/db?target_session_attrs=read-write",
	"postgres://u:pw@h/db?options=-c%20default_transaction_read_only%3Don",
}

// rotateLetters maps the letters g-z and G-Z of s within [from, to) to
// others of the same range: the structure of a DSN (delimiters, percent
// escapes, digits) stays the same, so any message that depends only on the
// structure stays the same too.
func rotateLetters(s string, from, to int) string {
	b := []byte(s)
	for i := max(from, 0); i < min(to, len(b)); i++ {
		switch c := b[i]; {
		case 'g' <= c && c <= 'z':
			b[i] = 'g' + (c-'g'+7)%20
		case 'G' <= c && c <= 'Z':
			b[i] = 'G' + (c-'G'+7)%20
		}
	}
	return string(b)
}

func FuzzParse(f *testing.F) {
	for _, s := range dsnSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			if !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("error not fence.ErrInvalid: %v", err)
			}
			// No error quotes anything after the scheme: with the letters
			// there changed, the message is the same.
			if _, rest, ok := strings.Cut(s, "://"); ok {
				s2 := rotateLetters(s, len(s)-len(rest), len(s))
				if _, err2 := Parse(s2); err2 == nil || err2.Error() != err.Error() {
					t.Fatalf("error depends on the text after the scheme:\n%q: %v\n%q: %v", s, err, s2, err2)
				}
			}
			return
		}
		switch d.Dialect {
		case fence.SQLite, fence.Postgres, fence.MySQL:
		default:
			t.Fatalf("dialect %q", d.Dialect)
		}
		if d.HasPassword != (len(d.spans) > 0) {
			t.Fatalf("HasPassword %v with secrets at %v", d.HasPassword, d.spans)
		}
		// Redacted does not depend on the secrets: with their letters
		// changed, it is the same.
		s2 := s
		for _, sp := range d.spans {
			s2 = rotateLetters(s2, sp[0], sp[1])
		}
		d2, err := Parse(s2)
		if err != nil || d2.Redacted != d.Redacted {
			t.Fatalf("Redacted depends on the secrets:\n%q: %q\n%q: %q %v", s, d.Redacted, s2, d2.Redacted, err)
		}
		for _, sec := range d.secrets {
			if len(sec) >= 4 && strings.Contains(d.Redacted, sec) && !strings.Contains(s2, sec) {
				t.Fatalf("Redacted %q shows secret %q", d.Redacted, sec)
			}
		}
	})
}
