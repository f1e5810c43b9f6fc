package mysql

import (
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"net"
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
)

// Open opens a MySQL or MariaDB database from a URL:
//
//	mysql://user:password@host:port/dbname?param=value&…
//
// The port defaults to 3306; a "socket" parameter connects through that Unix
// socket instead of host:port. Other parameters are go-sql-driver's
// (timeout, readTimeout, tls, …) or, as in its DSN format, session
// variables. Unless the URL sets them, Open adds:
//
//   - clientFoundRows=true: affected rows count matched rather than changed
//     rows, so a fenced user write that matched its row but left it as it
//     was is not mistaken for a rejection. fence's own statements always
//     change the rows they match and do not depend on it.
//   - interpolateParams=true: one round trip per statement instead of a
//     prepare, an execute and a close. go-sql-driver refuses it with the
//     multi-byte character sets where client-side escaping is unsafe (big5,
//     gbk, sjis, …); with one of those, set interpolateParams=false.
//   - time_zone='+00:00': fence never depends on the session time zone, but
//     a UTC session makes the execution-time clock exact even across a DST
//     change (see execNowMs), and leaves nothing local to misread.
//
// Open does not connect. Errors never contain the password.
func Open(dsn string) (*sql.DB, error) {
	c, err := NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// NewConnector returns the connector Open opens its handle with (same URL,
// same defaults), for a caller that wraps connections (instrumentation,
// round-trip counting) and calls sql.OpenDB itself. Errors never contain the
// password.
func NewConnector(dsn string) (sqldriver.Connector, error) {
	cfg, err := parseURL(dsn)
	if err != nil {
		return nil, err
	}
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, redact(err, cfg.Passwd)
	}
	return c, nil
}

// parseURL converts a mysql:// URL into go-sql-driver's configuration, with
// the defaults Open documents.
func parseURL(dsn string) (*gomysql.Config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		// url.Error repeats the URL, and even the inner error can quote part
		// of an unescaped password (a '/' in it ends the host), so say only
		// what to check.
		return nil, errors.New("mysql: malformed DSN: want mysql://user:password@host:port/dbname?param=value, with special characters in the password percent-encoded")
	}
	if !strings.EqualFold(u.Scheme, "mysql") {
		return nil, errors.New("mysql: DSN scheme must be mysql://")
	}
	pass, _ := u.User.Password()
	params := u.Query()

	base := gomysql.NewConfig()
	base.User = u.User.Username()
	base.DBName = strings.TrimPrefix(u.Path, "/")
	if sock := params.Get("socket"); sock != "" {
		base.Net, base.Addr = "unix", sock
		params.Del("socket")
	} else {
		if u.Host == "" {
			return nil, errors.New("mysql: DSN has no host (want mysql://user:password@host:port/dbname)")
		}
		port := u.Port()
		if port == "" {
			port = "3306"
		}
		base.Net, base.Addr = "tcp", net.JoinHostPort(u.Hostname(), port)
	}
	if base.DBName == "" || strings.Contains(base.DBName, "/") {
		return nil, errors.New("mysql: DSN needs exactly one database name (want mysql://user:password@host:port/dbname)")
	}

	// Let go-sql-driver parse its own parameters, from a DSN that never held
	// the password, so none of its errors can quote it.
	s := base.FormatDSN()
	if len(params) > 0 {
		sep := "?"
		if strings.Contains(s, "?") {
			sep = "&"
		}
		s += sep + params.Encode()
	}
	cfg, err := gomysql.ParseDSN(s)
	if err != nil {
		return nil, redact(errors.New("mysql: invalid DSN parameter: "+err.Error()), pass)
	}
	cfg.Passwd = pass
	// The driver's own log lines ("closing bad idle connection: EOF") go to
	// the process's stderr by default; every failure they describe is also
	// returned as an error, which is where fence reports it.
	cfg.Logger = quiet{}
	if !params.Has("clientFoundRows") {
		cfg.ClientFoundRows = true
	}
	if !params.Has("interpolateParams") {
		cfg.InterpolateParams = true
	}
	if !params.Has("time_zone") {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["time_zone"] = "'+00:00'"
	}
	return cfg, nil
}

// redact replaces the password in err's text, in case a library quoted it.
func redact(err error, pass string) error {
	if err == nil || pass == "" || !strings.Contains(err.Error(), pass) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pass, "xxxxx"))
}

// quiet discards go-sql-driver's log output.
type quiet struct{}

func (quiet) Print(...any) {}
