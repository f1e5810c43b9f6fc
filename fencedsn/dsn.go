// Package fencedsn opens a fence store from a data source name — the
// sqlite:, postgres:// and mysql:// strings of the fence CLI and of
// FENCE_DSN — for programs that let the user choose the database at run
// time. It links every driver (SQLite, PostgreSQL, MySQL); a program that
// knows its database imports only that driver's package and calls
// fence.New instead.
package fencedsn

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/dsnurl"
)

// Default is used when neither --dsn nor FENCE_DSN is set: a SQLite file in
// the working directory, so a first run needs nothing installed.
const Default = "sqlite:fence.db"

// DSN is a parsed data source name.
type DSN struct {
	Dialect fence.Dialect
	// Path is the SQLite file (or ":memory:").
	Path string
	// Redacted is the DSN rebuilt from its parsed parts with the password
	// and every secret parameter (password, sslpassword, anything named
	// like a key, token or secret) replaced by xxxxx: safe to print.
	Redacted string
	// HasPassword reports whether the DSN carries a secret: a password in
	// the userinfo or a secret parameter. A DSN given on a command line
	// with one shows in ps.
	HasPassword bool

	secrets []string // every form of every secret, for scrub
	spans   [][2]int // where the secrets are in the DSN, for FuzzParseDSN
}

// Parse checks a DSN's form without connecting. Errors wrap fence.ErrInvalid and
// never quote any part of the DSN after its scheme.
//
// postgres:// and mysql:// DSNs are split the way pgx splits them (libpq's
// rules; see internal/dsnurl): the userinfo ends at the first '@' before any
// '/', so '#', '?' and ':' in a password need no escaping, but '/' and '@' do
// (%2F, %40). A DSN that a reader splitting at the last '@' would read
// differently is refused rather than guessed at.
func Parse(dsn string) (DSN, error) {
	if dsn == "" {
		return DSN{}, fmt.Errorf("%w: empty DSN (want sqlite:PATH, postgres://… or mysql://…)", fence.ErrInvalid)
	}
	if strings.ContainsRune(dsn, 0) {
		return DSN{}, fmt.Errorf("%w: DSN contains a NUL byte", fence.ErrInvalid)
	}
	scheme, rest, ok := strings.Cut(dsn, ":")
	if looksKeyValue(dsn, scheme, ok) {
		// libpq's key=value form: whatever precedes the first ':' may
		// hold the password (password=a:b), so nothing of it is quoted.
		return DSN{}, fmt.Errorf("%w: a key=value DSN (host=… user=… password=…) is not supported: write it as postgres://user:password@host:port/dbname?param=value", fence.ErrInvalid)
	}
	if !ok || !isScheme(scheme) {
		return DSN{}, fmt.Errorf("%w: DSN has no scheme (want sqlite:PATH, postgres://… or mysql://…)", fence.ErrInvalid)
	}
	switch strings.ToLower(scheme) {
	case "sqlite", "sqlite3":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return DSN{}, fmt.Errorf("%w: sqlite DSN has no path (want sqlite:PATH)", fence.ErrInvalid)
		}
		return DSN{Dialect: fence.SQLite, Path: path, Redacted: dsn}, nil
	case "postgres", "postgresql", "mysql":
	default:
		return DSN{}, fmt.Errorf("%w: unknown DSN scheme %q (want sqlite, postgres, postgresql or mysql)", fence.ErrInvalid, clip(scheme))
	}
	scheme = strings.ToLower(scheme)
	if !strings.HasPrefix(rest, "//") {
		return DSN{}, fmt.Errorf("%w: %s DSN is not a URL (want %s://user:password@host:port/dbname)", fence.ErrInvalid, scheme, scheme)
	}
	u, err := dsnurl.Parse(dsn)
	if err != nil {
		return DSN{}, fmt.Errorf("%w: malformed %s DSN: %v", fence.ErrInvalid, scheme, err)
	}
	d := DSN{Dialect: fence.Postgres}
	if scheme == "mysql" {
		d.Dialect = fence.MySQL
		if u.DBName == "" {
			return DSN{}, fmt.Errorf("%w: mysql DSN has no database name (want mysql://user:password@host:port/dbname)", fence.ErrInvalid)
		}
	}
	d.secrets, d.spans = u.Secrets(dsn), u.SecretSpans()
	d.HasPassword = len(d.secrets) > 0
	d.Redacted = redacted(u)
	return d, nil
}

// redacted rebuilds u for printing, from parsed parts only.
func redacted(u *dsnurl.URL) string {
	var b strings.Builder
	b.WriteString(u.Scheme + "://")
	if u.HasUserinfo {
		b.WriteString(url.PathEscape(u.User))
		if u.HasPassword {
			b.WriteString(":xxxxx")
		}
		b.WriteByte('@')
	}
	for i, h := range u.Hosts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(h.Host)
		if h.Port != "" {
			b.WriteString(":" + h.Port)
		}
	}
	if u.HasPath {
		b.WriteString("/" + url.PathEscape(u.DBName))
	}
	for i, p := range u.Params {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		v := url.QueryEscape(p.Value)
		if dsnurl.IsSecret(p.Key) {
			v = "xxxxx"
		}
		b.WriteString(url.QueryEscape(p.Key) + "=" + v)
	}
	return b.String()
}

// scrub removes every secret of d from a driver's error text, in the forms a
// driver may echo it (decoded, as written, escaped).
func scrub(err error, d DSN) string {
	msg := err.Error()
	for _, s := range d.secrets {
		if len(s) < 3 {
			continue // "xx" would mangle the message and reveal nothing
		}
		for _, f := range []string{s, url.QueryEscape(s), url.PathEscape(s)} {
			msg = strings.ReplaceAll(msg, f, "xxxxx")
		}
	}
	return msg
}

// looksKeyValue reports whether dsn is in libpq's key=value form: an '='
// or a space before the first ':' (or anywhere, when there is no ':').
func looksKeyValue(dsn, scheme string, hasColon bool) bool {
	if !hasColon {
		scheme = dsn
	}
	return strings.ContainsAny(scheme, "= \t\n\r")
}

// isScheme reports whether s is a URL scheme as RFC 3986 spells one
// (ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )), short enough to be a name:
// only such a string is quoted back in an error, since anything else before
// the first ':' may be part of a password.
func isScheme(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// clip shortens s for an error message.
func clip(s string) string {
	const max = 48 // bytes; %q can make each one four characters
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
