package mysql

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"io"
	"sync"

	gomysql "github.com/go-sql-driver/mysql"
)

// retryParam is the MariaDB Galera session variable fence needs at 0: a
// node that re-runs an autocommit statement after it failed certification
// makes fence's acquire (RETURNING) and revoke (LAST_INSERT_ID) answer with
// an outcome that was not the one committed (CheckSession).
const retryParam = "wsrep_retry_autocommit"

// connector is the connector of Open and NewConnector. It sets
// wsrep_retry_autocommit=0 on every session of a server that has the
// variable, so that a Galera cluster whose nodes keep MariaDB's default (1)
// needs no setting from the user. MySQL has no such variable and refuses
// "SET wsrep_retry_autocommit" (and with it the connection), so the first
// connection asks the server; from then on the answer is go-sql-driver's
// connection parameter, sent in the one SET statement it already sends for
// autocommit and time_zone: no round trip more per connection. The server
// behind one DSN is assumed to stay the same product.
type connector struct {
	cfg *gomysql.Config

	mu     sync.Mutex
	next   sqldriver.Connector // the connector new connections come from
	probed bool                // next has the answer; no more probes
}

// newConnector returns cfg's connector; a DSN that sets the variable
// itself (to 0: the allow-list refuses anything else) is not probed.
func newConnector(cfg *gomysql.Config) (*connector, error) {
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	_, given := cfg.Params[retryParam]
	return &connector{cfg: cfg, next: c, probed: given}, nil
}

func (c *connector) Driver() sqldriver.Driver { return gomysql.MySQLDriver{} }

func (c *connector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	c.mu.Lock()
	next, probed := c.next, c.probed
	c.mu.Unlock()
	conn, err := next.Connect(ctx)
	if err != nil || probed {
		return conn, err
	}
	has, err := hasRetryVariable(ctx, conn)
	if err == nil && has {
		err = execConn(ctx, conn, retrySetSQL)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.probed {
		if has {
			cfg := c.cfg.Clone()
			cfg.Params[retryParam] = "0"
			set, err := gomysql.NewConnector(cfg)
			if err != nil {
				conn.Close()
				return nil, err
			}
			c.next = set
		}
		c.probed = true
	}
	return conn, nil
}

var (
	retryProbeSQL = query("wsrep_retry_probe")
	retrySetSQL   = query("wsrep_retry_set")
)

// query reads one statement of queries/ for use outside a Driver (which
// reads them all with its table prefix); these name no table.
func query(name string) string {
	b, err := queries.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return stripComments(string(b))
}

// hasRetryVariable reports whether the server knows wsrep_retry_autocommit.
func hasRetryVariable(ctx context.Context, conn sqldriver.Conn) (bool, error) {
	q, ok := conn.(sqldriver.QueryerContext)
	if !ok {
		return false, errors.New("mysql: go-sql-driver's connection cannot run a query")
	}
	rows, err := q.QueryContext(ctx, retryProbeSQL, nil)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	dest := make([]sqldriver.Value, len(rows.Columns()))
	switch err := rows.Next(dest); {
	case err == nil:
		return true, nil
	case errors.Is(err, io.EOF):
		return false, nil
	default:
		return false, err
	}
}

func execConn(ctx context.Context, conn sqldriver.Conn, stmt string) error {
	e, ok := conn.(sqldriver.ExecerContext)
	if !ok {
		return errors.New("mysql: go-sql-driver's connection cannot run a statement")
	}
	_, err := e.ExecContext(ctx, stmt, nil)
	return err
}
