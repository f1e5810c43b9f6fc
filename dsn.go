package fence

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// DefaultDSN is used when neither --dsn nor FENCE_DSN is set: a SQLite file in
// the working directory, so a first run needs nothing installed.
const DefaultDSN = "sqlite:fence.db"

// DSN is a parsed data source name.
type DSN struct {
	Dialect Dialect
	// Path is the SQLite file (or ":memory:").
	Path string
	// Redacted is the DSN with any password replaced, safe to print.
	Redacted string
	password string
}

// ParseDSN checks a DSN's form without connecting. Errors wrap ErrInvalid and
// never contain the password.
func ParseDSN(dsn string) (DSN, error) {
	if dsn == "" {
		return DSN{}, fmt.Errorf("%w: empty DSN (want sqlite:PATH, postgres://… or mysql://…)", ErrInvalid)
	}
	if strings.ContainsRune(dsn, 0) {
		return DSN{}, fmt.Errorf("%w: DSN contains a NUL byte", ErrInvalid)
	}
	scheme, rest, ok := strings.Cut(dsn, ":")
	if !ok {
		return DSN{}, fmt.Errorf("%w: DSN has no scheme (want sqlite:PATH, postgres://… or mysql://…)", ErrInvalid)
	}
	switch strings.ToLower(scheme) {
	case "sqlite", "sqlite3":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return DSN{}, fmt.Errorf("%w: sqlite DSN has no path (want sqlite:PATH)", ErrInvalid)
		}
		return DSN{Dialect: SQLite, Path: path, Redacted: dsn}, nil
	case "postgres", "postgresql", "mysql":
	default:
		return DSN{}, fmt.Errorf("%w: unknown DSN scheme %q (want sqlite, postgres, postgresql or mysql)", ErrInvalid, clip(scheme))
	}
	u, err := url.Parse(dsn)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the whole URL, password included
		}
		return DSN{}, fmt.Errorf("%w: malformed %s DSN: %v", ErrInvalid, scheme, err)
	}
	d := DSN{Dialect: Postgres}
	if strings.EqualFold(scheme, "mysql") {
		d.Dialect = MySQL
	}
	if u.Host == "" {
		return DSN{}, fmt.Errorf("%w: %s DSN has no host (want %s://user:pass@host:port/db)", ErrInvalid, scheme, scheme)
	}
	if d.Dialect == MySQL && strings.Trim(u.Path, "/") == "" {
		return DSN{}, fmt.Errorf("%w: mysql DSN has no database name (want mysql://user:pass@host:port/db)", ErrInvalid)
	}
	if p, ok := u.User.Password(); ok {
		d.password = p
	}
	d.Redacted = u.Redacted()
	if q := u.Query(); q.Has("password") {
		d.password = q.Get("password")
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
		d.Redacted = u.Redacted()
	}
	return d, nil
}

// scrub removes the password from a driver's error text, in case a driver
// echoes its configuration.
func scrub(err error, d DSN) string {
	msg := err.Error()
	if d.password != "" {
		msg = strings.ReplaceAll(msg, d.password, "xxxxx")
		if esc := url.QueryEscape(d.password); esc != d.password {
			msg = strings.ReplaceAll(msg, esc, "xxxxx")
		}
	}
	return msg
}
