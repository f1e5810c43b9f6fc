package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/dsnurl"
)

// Open opens a MySQL or MariaDB database from a URL:
//
//	mysql://user:password@host:port/dbname?param=value&…
//
// The URL is split as pgx splits a postgres:// URL (see internal/dsnurl):
// '#', '?' and ':' in the password need no escaping, '/' and '@' must be
// written %2F and %40. The port defaults to 3306; a "socket" parameter
// connects through that Unix socket instead of host:port.
//
// Parameters are an allow-list (see params). go-sql-driver sends every
// parameter it does not know as "SET name = value", SQL text taken from the
// URL (?password=PASSWORD('x') changed an account's password), so anything
// else is refused. Open forces, on every connection:
//
//   - autocommit=1: fence's lease statements are single statements that must
//     commit on their own. With autocommit=0 (a session variable in the DSN or
//     the server's default) an acquire returns fence N, holds the row lock in
//     an open transaction on a pooled connection and never commits; when that
//     connection goes, the next owner gets fence N again.
//   - clientFoundRows=true: affected rows count matched rather than changed
//     rows, so a fenced user write that matched its row but left it as it
//     was is not mistaken for a refusal.
//   - time_zone='+00:00': fence's clock is computed independently of the
//     session time zone, except that the execution-time clock (execNowMs) is
//     off by the DST jump if a DST change falls inside a statement; UTC has
//     none.
//   - wsrep_retry_autocommit=0 on a server that has the variable (MariaDB
//     built with Galera's wsrep, whether or not it runs a cluster): a Galera
//     node re-runs an autocommit statement that failed certification, and
//     fence's acquire and revoke would then answer with an outcome that was
//     not the one committed. MariaDB's default is 1. The first connection
//     asks the server whether it has the variable (MySQL does not, and
//     refuses to set it); every connection then sets it (connector.go).
//
// A DSN that sets one of these to another value is refused. The transaction
// isolation is the server's (REPEATABLE READ by default); fence's statements
// hold under READ COMMITTED and REPEATABLE READ (race_test.go), and a session
// at READ UNCOMMITTED is refused by CheckSession. interpolateParams defaults
// to true (one round trip per statement instead of prepare, execute and
// close); go-sql-driver refuses it with the multi-byte character sets where
// client-side escaping is unsafe (big5, gbk, sjis, …): with one of those, set
// interpolateParams=false.
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
	c, err := newConnector(cfg)
	if err != nil {
		return nil, redact(err, cfg.Passwd)
	}
	return c, nil
}

// param checks one allowed parameter's value; nil accepts any value that
// go-sql-driver itself parses.
type param func(v string) error

var (
	identRE = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

	isBool = func(v string) error {
		if _, err := strconv.ParseBool(v); err != nil {
			return errors.New("must be true or false")
		}
		return nil
	}
	// isIdent guards the values go-sql-driver pastes into SQL text itself
	// (charset and collation go into SET NAMES unquoted).
	isIdent = func(v string) error {
		for s := range strings.SplitSeq(v, ",") {
			if !identRE.MatchString(s) {
				return errors.New("must be a character set or collation name (letters, digits, '_')")
			}
		}
		return nil
	}
	isTrue = func(name string) param {
		return func(v string) error {
			if b, err := strconv.ParseBool(v); err != nil || !b {
				return fmt.Errorf("fence requires %s=true", name)
			}
			return nil
		}
	}
	// oneOf accepts exactly the given SQL texts: session variables are sent
	// as "SET name = value" with value as written.
	oneOf = func(why string, vs ...string) param {
		return func(v string) error {
			for _, ok := range vs {
				if strings.EqualFold(v, ok) {
					return nil
				}
			}
			return errors.New(why)
		}
	}
	isSeconds = func(v string) error {
		if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 31536000 || v[0] == '+' {
			return errors.New("must be a whole number of seconds")
		}
		return nil
	}
)

// params is the allow-list of DSN parameters: go-sql-driver's own options
// (which it parses and never sends as SQL), fence's socket, and the few
// session variables fence forces or that are useful and checked by value.
// Left out on purpose: allowAllFiles (LOAD DATA LOCAL of any client file;
// fence never loads data), strict (go-sql-driver v1.10 panics on it), and
// every other session variable (sql_mode and the like belong in the server
// or account configuration, where they cannot smuggle SQL through a URL).
var params = map[string]param{
	"socket":                   nil,
	"tls":                      nil,
	"timeout":                  nil,
	"readTimeout":              nil,
	"writeTimeout":             nil,
	"charset":                  isIdent,
	"collation":                isIdent,
	"loc":                      nil,
	"parseTime":                isBool,
	"timeTruncate":             nil,
	"interpolateParams":        isBool,
	"maxAllowedPacket":         nil,
	"compress":                 isBool,
	"connectionAttributes":     nil,
	"checkConnLiveness":        isBool,
	"rejectReadOnly":           isBool,
	"columnsWithAlias":         isBool,
	"serverPubKey":             nil,
	"allowNativePasswords":     isBool,
	"allowCleartextPasswords":  isBool,
	"allowFallbackToPlaintext": isBool,
	"allowOldPasswords":        isBool,
	// golang-migrate's MySQL driver needs it; fence's fenced statements
	// refuse a second statement in their own text.
	"multiStatements": isBool,

	"clientFoundRows": isTrue("clientFoundRows"),
	"autocommit": oneOf("fence requires autocommit=1: its lease statements must commit on their own; "+
		"remove autocommit from the DSN", "1", "ON", "true"),
	"time_zone": oneOf("fence requires the session time zone '+00:00' (time_zone=%27%2B00%3A00%27) "+
		"or no time_zone parameter", "'+00:00'", "'UTC'"),
	// MariaDB before 11.1 names it tx_isolation, MySQL 8.0 only
	// transaction_isolation.
	"transaction_isolation":    oneOf(isoWhy, isoValues...),
	"tx_isolation":             oneOf(isoWhy, isoValues...),
	"innodb_lock_wait_timeout": isSeconds,
	// MariaDB Galera: the server must not re-run a statement that failed
	// certification (CheckSession refuses a Galera session otherwise). Open
	// sets it where the server has it; a DSN may still say it, for a
	// connector of its own.
	"wsrep_retry_autocommit": oneOf("fence requires wsrep_retry_autocommit=0 on Galera: a re-run acquire or revoke "+
		"reports an outcome other than the one committed", "0"),
	// MariaDB Galera: which statements first wait until the node has applied
	// what the cluster committed before them (a bitmask, 0-15; 7 = reads,
	// updates, deletes and inserts), so that a client sees its own writes
	// made through another node. Fencing does not depend on it
	// (docs/adr/0006-galera.md).
	"wsrep_sync_wait": func(v string) error {
		if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 15 || v[0] == '+' {
			return errors.New("must be a whole number from 0 to 15")
		}
		return nil
	},
	"lock_wait_timeout": isSeconds,
}

var isoValues = []string{"'READ-COMMITTED'", "'REPEATABLE-READ'", "'SERIALIZABLE'"}

const isoWhy = "must be 'READ-COMMITTED', 'REPEATABLE-READ' or 'SERIALIZABLE', quoted (%27READ-COMMITTED%27)"

// parseURL converts a mysql:// URL into go-sql-driver's configuration, with
// the defaults Open documents.
func parseURL(dsn string) (*gomysql.Config, error) {
	u, err := dsnurl.Parse(dsn)
	if err != nil {
		return nil, errors.New("mysql: malformed DSN: " + err.Error())
	}
	if u.Scheme != "mysql" {
		return nil, errors.New("mysql: DSN scheme must be mysql://")
	}

	base := gomysql.NewConfig()
	base.User = u.User
	base.DBName = u.DBName
	vals := map[string]string{}
	for _, p := range u.Params {
		check, ok := params[p.Key]
		if !ok {
			return nil, &driver.SettingError{Msg: "mysql: DSN parameter " + dsnurl.Describe(p.Key) +
				" is not one fence accepts: go-sql-driver would send it to the server as SQL (SET name = value); " +
				"set session variables in the server or account configuration (see mysql.Open for the accepted parameters)"}
		}
		if _, dup := vals[p.Key]; dup {
			return nil, &driver.SettingError{Msg: "mysql: DSN parameter " + dsnurl.Describe(p.Key) + " is given twice"}
		}
		if check != nil {
			if err := check(p.Value); err != nil {
				return nil, &driver.SettingError{Msg: "mysql: DSN parameter " + dsnurl.Describe(p.Key) + ": " + err.Error()}
			}
		}
		vals[p.Key] = p.Value
	}
	if sock, ok := vals["socket"]; ok {
		base.Net, base.Addr = "unix", sock
		delete(vals, "socket")
	} else {
		if len(u.Hosts) != 1 {
			return nil, errors.New("mysql: DSN needs exactly one host (want mysql://user:password@host:port/dbname)")
		}
		port := u.Hosts[0].Port
		if port == "" {
			port = "3306"
		}
		host := strings.TrimSuffix(strings.TrimPrefix(u.Hosts[0].Host, "["), "]")
		base.Net, base.Addr = "tcp", net.JoinHostPort(host, port)
	}
	if base.DBName == "" || strings.Contains(base.DBName, "/") {
		return nil, errors.New("mysql: DSN needs exactly one database name (want mysql://user:password@host:port/dbname)")
	}

	// Let go-sql-driver parse its own parameters, from a DSN that never held
	// the password, so none of its errors can quote it.
	s := base.FormatDSN()
	if len(vals) > 0 {
		sep := "?"
		if strings.Contains(s, "?") {
			sep = "&"
		}
		var q []string
		for k, v := range vals {
			q = append(q, k+"="+escapeParam(v))
		}
		s += sep + strings.Join(q, "&")
	}
	cfg, err := gomysql.ParseDSN(s)
	if err != nil {
		return nil, redact(errors.New("mysql: invalid DSN parameter: "+err.Error()), u.Password)
	}
	cfg.Passwd = u.Password
	// The driver's own log lines ("closing bad idle connection: EOF") go to
	// the process's stderr by default; every failure they describe is also
	// returned as an error, which is where fence reports it.
	cfg.Logger = quiet{}
	cfg.ClientFoundRows = true
	if _, ok := vals["interpolateParams"]; !ok {
		cfg.InterpolateParams = true
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["autocommit"] = "1"
	cfg.Params["time_zone"] = "'+00:00'"
	return cfg, nil
}

// escapeParam escapes a value for go-sql-driver's DSN, which unescapes
// values with url.QueryUnescape.
func escapeParam(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '&' || c == '%' || c == '+' || c == '=' || c == '#' || c == ' ' || c < 0x20 || c >= 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
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

// CheckSession verifies, on one connection of the driver's handle, the
// session settings fence relies on, and returns a *driver.SettingError that
// names the setting and the fix for a wrong one:
//
//   - autocommit must be 1 (see Open);
//   - the isolation level must not be READ UNCOMMITTED: IsHeld, Get and the
//     run ledger's reads would report uncommitted acquisitions;
//   - the session must not be read-only;
//   - on a MariaDB Galera node, wsrep_retry_autocommit must be 0: the node
//     re-runs an autocommit statement that failed certification, and the
//     acquire (RETURNING) and the revoke (LAST_INSERT_ID) then answer with
//     an outcome that was not the one committed (measured with the torture
//     harness across three nodes);
//   - the client character set must not be one where a backslash can end
//     a multibyte character (big5, cp932, gb18030, gbk, sjis): fence
//     reads a statement's literals as the server does only in the others;
//   - affected rows must count matched rows (CLIENT_FOUND_ROWS, a client
//     capability no variable shows, so it is tested on a TEMPORARY table:
//     found_rows_*.sql). This needs the CREATE TEMPORARY TABLES privilege.
//
// The time zone is not checked: it matters only to a statement that spans a
// DST change (see Open), and refusing every SYSTEM-zone handle for that
// would be out of proportion. Every connection of a pool is assumed to be
// made alike, as those of one DSN or connector are.
func (d *Driver) CheckSession(ctx context.Context) error {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var autocommit, readOnly int64
	var iso string
	err = c.QueryRowContext(ctx, d.q["check_session"]).Scan(&autocommit, &iso, &readOnly)
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me.Number == 1193 { // ER_UNKNOWN_SYSTEM_VARIABLE: MariaDB < 11.1
		err = c.QueryRowContext(ctx, d.q["check_session_mariadb"]).Scan(&autocommit, &iso, &readOnly)
	}
	if err != nil {
		return err
	}
	if autocommit != 1 {
		return &driver.SettingError{Msg: "mysql: the session has autocommit=0: fence's lease statements would never commit " +
			"(an acquire would hand out a fence that a later owner gets again); " +
			"remove autocommit=0 from the DSN or the server configuration (autocommit, init_connect), or open the store with fence.Open"}
	}
	if strings.EqualFold(iso, "READ-UNCOMMITTED") {
		return &driver.SettingError{Msg: "mysql: the session isolation level is READ-UNCOMMITTED: fence's reads would report uncommitted leases; " +
			"use READ-COMMITTED or REPEATABLE-READ (transaction_isolation in the server configuration)"}
	}
	if g, err := d.detectGalera(ctx, c); err != nil {
		return err
	} else if g {
		var retries int64
		if err := c.QueryRowContext(ctx, d.q["galera_retry_autocommit"]).Scan(&retries); err != nil {
			return err
		}
		if retries != 0 {
			return &driver.SettingError{Msg: fmt.Sprintf("mysql: this Galera node re-runs an autocommit statement that failed certification "+
				"(wsrep_retry_autocommit=%d): fence's acquire and revoke would then report an outcome other than the one committed "+
				"(measured: an acquisition reported with a fence that never committed); "+
				"open the handle with mysql.Open or fencedsn.Open (they set it on every connection), "+
				"or add wsrep_retry_autocommit=0 to go-sql-driver's DSN (it then sends SET wsrep_retry_autocommit=0 on every new connection), "+
				"or set wsrep_retry_autocommit=0 in the server configuration", retries)}
		}
	}
	if readOnly != 0 {
		return &driver.SettingError{Msg: "mysql: the session is read-only (transaction_read_only=1): fence cannot take or renew a lease; " +
			"connect to a writable server and unset transaction_read_only"}
	}
	var version string
	if err := c.QueryRowContext(ctx, d.q["server_version"]).Scan(&version); err != nil {
		return err
	}
	refusal := fencedSQLPolicy(version)
	d.fencedRefusal.Store(&refusal)
	var cs string
	if err := c.QueryRowContext(ctx, d.q["check_charset"]).Scan(&cs); err != nil {
		return err
	}
	if backslashTrail[strings.ToLower(cs)] {
		return &driver.SettingError{Msg: fmt.Sprintf("mysql: the session reads statements in %s, where a backslash (0x5C) can be the second byte of a character: "+
			"the server and fence would then disagree on where a string literal ends, and a fenced statement could hide SQL from fence's checks; "+
			"use utf8mb4 (charset=utf8mb4 in the DSN, or character_set_client on the server)", cs)}
	}
	return d.checkFoundRows(ctx, c)
}

// backslashTrail are the client character sets in which 0x5C, the
// backslash, can be the trailing byte of a multibyte character (the same
// list go-sql-driver refuses for interpolateParams).
var backslashTrail = map[string]bool{"big5": true, "cp932": true, "gb18030": true, "gbk": true, "sjis": true}

func (d *Driver) checkFoundRows(ctx context.Context, c *sql.Conn) error {
	if _, err := c.ExecContext(ctx, d.q["found_rows_create"]); err != nil {
		return fmt.Errorf("mysql: checking clientFoundRows needs a temporary table: %w", err)
	}
	defer c.ExecContext(context.WithoutCancel(ctx), d.q["found_rows_drop"])
	if _, err := c.ExecContext(ctx, d.q["found_rows_insert"]); err != nil {
		return err
	}
	res, err := c.ExecContext(ctx, d.q["found_rows_update"])
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return &driver.SettingError{Msg: "mysql: the handle counts changed rows, not matched rows (no clientFoundRows): " +
			"a fenced write that matched its row but changed nothing would be reported as refused; " +
			"set ClientFoundRows in go-sql-driver's Config (clientFoundRows=true in its DSN), or open the store with fence.Open"}
	}
	return nil
}
