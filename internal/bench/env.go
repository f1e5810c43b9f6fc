package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	sqldriver "database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/mysql"
	"github.com/fencekit/fence/sqlite"
)

// Env is one database under test: a store on fresh tables over a handle whose
// round trips are counted, plus the tables the baselines use. Close drops
// every table it created.
type Env struct {
	Dialect  fence.Dialect
	Redacted string // the DSN without its password
	DB       *sql.DB
	Store    *fence.Store
	Count    *Counter

	dsn    string
	prefix string
	tables []string // extra tables to drop
	peer   bool
	pool   *pgxpool.Pool // see Pgx
}

// Open connects to dsn (fence's DSN syntax) through a counting connector and
// migrates a store on fresh tables. opts are applied to the store after the
// table prefix.
func Open(ctx context.Context, dsn string, opts ...fence.Option) (*Env, error) {
	p, err := randomPrefix()
	if err != nil {
		return nil, err
	}
	return openPrefix(ctx, dsn, p, opts...)
}

// Peer opens a second Env on the same database and tables with a pool of its
// own, as another process would have: what it does is counted in its own
// Counter. It does not drop the tables on Close.
func (e *Env) Peer(ctx context.Context, opts ...fence.Option) (*Env, error) {
	p, err := openPrefix(ctx, e.dsn, e.prefix, opts...)
	if err != nil {
		return nil, err
	}
	p.tables = nil
	p.peer = true
	return p, nil
}

func openPrefix(ctx context.Context, dsn, prefix string, opts ...fence.Option) (*Env, error) {
	d, err := fencedsn.Parse(dsn)
	if err != nil {
		return nil, err
	}
	n := &Counter{}
	var c sqldriver.Connector
	switch d.Dialect {
	case fence.SQLite:
		if d.Path == ":memory:" {
			return nil, errors.New("bench: sqlite::memory: is private to one connection; give a file")
		}
		c, err = sqlite.NewConnector(d.Path)
	case fence.Postgres:
		c, err = pgxConnector(dsn, n)
	case fence.MySQL:
		c, err = mysql.NewConnector(dsn)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", d.Redacted, err)
	}
	db := sql.OpenDB(CountingConnector(c, n))
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: %s: %v", fence.ErrUnavailable, d.Redacted, err)
	}
	s, err := fencedsn.OpenDB(context.Background(), db, d.Dialect, append([]fence.Option{fence.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		db.Close()
		return nil, err
	}
	e := &Env{Dialect: d.Dialect, Redacted: d.Redacted, DB: db, Store: s, Count: n, dsn: dsn, prefix: prefix}
	if _, err := s.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return e, nil
}

// Close drops the tables (unless e is a Peer) and closes the handle.
func (e *Env) Close() error {
	ctx := context.Background()
	var errs []error
	if !e.peer {
		for _, t := range e.tables {
			if _, err := e.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
				errs = append(errs, err)
			}
		}
		errs = append(errs, e.Store.DropTables(ctx))
	}
	if e.pool != nil {
		e.pool.Close()
	}
	errs = append(errs, e.Store.Close(), e.DB.Close())
	return errors.Join(errs...)
}

// Table returns the name of a bench table (prefix + suffix).
func (e *Env) Table(suffix string) string { return e.prefix + suffix }

// Rebind turns ? placeholders into the dialect's.
func (e *Env) Rebind(q string) string { return fence.Rebind(e.Dialect, q) }

// createLike creates prefix+suffix with the lease table's columns and
// primary key, for the floor UPDATE.
func (e *Env) createLike(ctx context.Context, suffix string) (string, error) {
	t, leases := e.Table(suffix), e.Table("leases")
	var q string
	switch e.Dialect {
	case fence.Postgres:
		q = fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL)", t, leases)
	case fence.MySQL:
		q = fmt.Sprintf("CREATE TABLE %s LIKE %s", t, leases)
	default:
		// SQLite's lease table, as its migration creates it.
		q = fmt.Sprintf(`CREATE TABLE %s (
			lease_name TEXT NOT NULL PRIMARY KEY, owner_token TEXT NOT NULL,
			fence_token INTEGER NOT NULL, state TEXT NOT NULL,
			leased_until_ms INTEGER NOT NULL, acquired_at_ms INTEGER NOT NULL,
			updated_at_ms INTEGER NOT NULL, renew_count INTEGER NOT NULL DEFAULT 0,
			holder TEXT NOT NULL DEFAULT '', guard_seq INTEGER NOT NULL DEFAULT 0)`, t)
	}
	if err := e.exec(ctx, q); err != nil {
		return "", err
	}
	return t, nil
}

// createItems creates prefix+suffix (id, n), the target of the fenced and
// unfenced writes, with rows 1..rows.
func (e *Env) createItems(ctx context.Context, suffix string, rows int) (string, error) {
	t := e.Table(suffix)
	if err := e.exec(ctx, fmt.Sprintf("CREATE TABLE %s (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL)", t)); err != nil {
		return "", err
	}
	for start := 1; start <= rows; start += 1000 {
		var b strings.Builder
		fmt.Fprintf(&b, "INSERT INTO %s (id, n) VALUES ", t)
		for i := start; i < start+1000 && i <= rows; i++ {
			if i > start {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "(%d, 0)", i)
		}
		if _, err := e.DB.ExecContext(ctx, b.String()); err != nil {
			return "", err
		}
	}
	return t, nil
}

// DDL runs a CREATE TABLE (or other DDL) on e; the tables it creates are
// dropped by Close. For cases defined outside this package (the peers).
func (e *Env) DDL(ctx context.Context, q string) error { return e.exec(ctx, q) }

// exec runs DDL and remembers created tables for Close.
func (e *Env) exec(ctx context.Context, q string) error {
	if _, err := e.DB.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("bench: %s: %w", firstWords(q), err)
	}
	if t := createdTable(q); t != "" {
		e.tables = append(e.tables, t)
	}
	return nil
}

// createdTable is the table a CREATE [UNLOGGED] TABLE [IF NOT EXISTS]
// statement creates, or "". (River's UNLOGGED table was left behind by
// every peers run when only CREATE TABLE was recognised.)
func createdTable(q string) string {
	f := strings.Fields(q)
	if len(f) < 3 || !strings.EqualFold(f[0], "CREATE") {
		return ""
	}
	f = f[1:]
	if strings.EqualFold(f[0], "UNLOGGED") {
		f = f[1:]
	}
	if len(f) < 2 || !strings.EqualFold(f[0], "TABLE") {
		return ""
	}
	f = f[1:]
	if len(f) > 3 && strings.EqualFold(f[0], "IF") && strings.EqualFold(f[1], "NOT") && strings.EqualFold(f[2], "EXISTS") {
		f = f[3:]
	}
	return f[0]
}

func (e *Env) hasTable(name string) bool { return slices.Contains(e.tables, name) }

func firstWords(q string) string {
	f := strings.Fields(q)
	return strings.Join(f[:min(len(f), 4)], " ")
}

func randomPrefix() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "fbench" + hex.EncodeToString(b[:]) + "_", nil
}
