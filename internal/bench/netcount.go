package bench

import (
	"context"
	sqldriver "database/sql/driver"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencekit/fence/postgres"
)

// turnConn counts network round trips as turns of the conversation: a read
// that follows a write. It sees what the driver-level count cannot, such as
// pgx's ping in ResetSession when a pooled connection was idle for more than
// a second, or a statement prepared on first use.
type turnConn struct {
	net.Conn
	n     *atomic.Int64
	wrote bool // guarded by the driver's own serial use of a connection
}

func (c *turnConn) Write(b []byte) (int, error) {
	c.wrote = true
	return c.Conn.Write(b)
}

func (c *turnConn) Read(b []byte) (int, error) {
	if c.wrote {
		c.wrote = false
		c.n.Add(1)
	}
	return c.Conn.Read(b)
}

// pgxConnector is postgres.NewConnector with every connection's turns
// counted in n.net.
func pgxConnector(dsn string, n *Counter) (sqldriver.Connector, error) {
	// Validate through the driver first: its errors never hold the password.
	if _, err := postgres.NewConnector(dsn); err != nil {
		return nil, err
	}
	scheme, rest, _ := strings.Cut(dsn, "://")
	cfg, err := pgx.ParseConfig(strings.ToLower(scheme) + "://" + rest)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{KeepAlive: 5 * time.Minute}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &turnConn{Conn: c, n: &n.net}, nil
	}
	return stdlib.GetConnector(*cfg), nil
}
