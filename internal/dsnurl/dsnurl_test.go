package dsnurl

import (
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

var seeds = []string{
	"postgres://app2:2024#Summer@127.0.0.1:25432/h3?sslmode=disable",
	"postgres://app:Xy7?kLm9@db.internal/app",
	"postgres://app:Xy7:kLm9@db.internal/app",
	"postgres://app:a%2Fb%40c%25@h:5433/db",
	"postgres://app:Xy7/kLm9@db.internal:5432/app",
	"postgres://app:Xy7@kLm9@db.internal/app",
	"postgres://app:1234/kLm9@db.internal/app",
	"postgres://h?application_name=a@b",
	"postgres://u@h/db?password=p%23w",
	"postgres://u:pw@[::1]:5432/db",
	"postgres://u:pw@h1:5432,h2:5433/db",
	"postgres://%20u%20:pw@h/db",
}

// Wherever Parse accepts a postgres:// DSN, pgx reads the same user,
// password, hosts, ports and database from it (or refuses it): fence and
// the driver agree on which bytes are the password.
func FuzzAgreesWithPgx(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !strings.HasPrefix(s, "postgres://") {
			return
		}
		u, err := Parse(s)
		if err != nil {
			return
		}
		cfg, perr := pgconn.ParseConfig(s) // parses only; nothing connects
		if perr != nil {
			return
		}
		if u.User != "" && cfg.User != u.User {
			t.Fatalf("%q: user %q, pgx %q", s, u.User, cfg.User)
		}
		if pw, ok := u.Get("password"); ok {
			if cfg.Password != pw {
				t.Fatalf("%q: password parameter %q, pgx %q", s, pw, cfg.Password)
			}
		} else if u.HasPassword && cfg.Password != u.Password {
			t.Fatalf("%q: password %q, pgx %q", s, u.Password, cfg.Password)
		}
		if u.HasPath && u.DBName != "" {
			if db, ok := u.Get("dbname"); !ok && cfg.Database != u.DBName {
				if db2, ok := u.Get("database"); !ok || db2 != cfg.Database {
					t.Fatalf("%q: database %q, pgx %q (%q)", s, u.DBName, cfg.Database, db)
				}
			}
		}
		if _, ok := u.Get("host"); ok {
			return
		}
		if _, ok := u.Get("port"); ok {
			return
		}
		// pgx lists a host twice under sslmode=prefer (with and without TLS).
		var hosts []*pgconn.FallbackConfig
		for _, h := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port}}, cfg.Fallbacks...) {
			if n := len(hosts); n == 0 || hosts[n-1].Host != h.Host || hosts[n-1].Port != h.Port {
				hosts = append(hosts, h)
			}
		}
		if len(hosts) < len(u.Hosts) {
			t.Fatalf("%q: %d hosts, pgx %d", s, len(u.Hosts), len(hosts))
		}
		for i, h := range u.Hosts {
			want := strings.TrimSuffix(strings.TrimPrefix(h.Host, "["), "]")
			if dec, err := decode(want); err == nil {
				want = dec
			}
			if hosts[i].Host != want {
				t.Fatalf("%q: host %d %q, pgx %q", s, i, want, hosts[i].Host)
			}
			if h.Port != "" && strconv.Itoa(int(hosts[i].Port)) != h.Port {
				t.Fatalf("%q: port %d %q, pgx %d", s, i, h.Port, hosts[i].Port)
			}
		}
	})
}

func TestSpans(t *testing.T) {
	s := "postgres://app:Xy7%23q@h/db?sslpassword=abc&x=1"
	u, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := s[u.PasswordSpan[0]:u.PasswordSpan[1]]; got != "Xy7%23q" || u.Password != "Xy7#q" {
		t.Errorf("password span %q, password %q", got, u.Password)
	}
	spans := u.SecretSpans()
	if len(spans) != 2 || s[spans[1][0]:spans[1][1]] != "abc" {
		t.Errorf("spans %v", spans)
	}
}
