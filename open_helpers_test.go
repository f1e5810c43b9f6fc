package fence

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence/mysql"
	"github.com/fencekit/fence/postgres"
	"github.com/fencekit/fence/sqlite"
)

// The root package links no driver; its own tests open stores the way a
// program does, through a driver package and New. (fencedsn.Open cannot
// be used here: it imports this package.)

func testOpen(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	scheme, rest, _ := strings.Cut(dsn, ":")
	var (
		d   Driver
		err error
	)
	switch strings.ToLower(scheme) {
	case "sqlite":
		var x *sqlite.Driver
		if x, err = sqlite.OpenDriver(strings.TrimPrefix(rest, "//"), ""); err == nil {
			d = x
		}
	case "postgres", "postgresql":
		var x *postgres.Driver
		if x, err = postgres.OpenDriver(dsn, ""); err == nil {
			d = x
		}
	case "mysql":
		var x *mysql.Driver
		if x, err = mysql.OpenDriver(dsn, ""); err == nil {
			d = x
		}
	default:
		return nil, fmt.Errorf("%w: test DSN scheme %q", ErrInvalid, scheme)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	s, err := New(ctx, d, opts...)
	if err != nil {
		d.Close()
	}
	return s, err
}

func testOpenDB(db *sql.DB, dialect Dialect, opts ...Option) (*Store, error) {
	var (
		d   Driver
		err error
	)
	switch dialect {
	case SQLite:
		var x *sqlite.Driver
		if x, err = sqlite.New(db, ""); err == nil {
			d = x
		}
	case Postgres:
		var x *postgres.Driver
		if x, err = postgres.New(db, ""); err == nil {
			d = x
		}
	case MySQL:
		var x *mysql.Driver
		if x, err = mysql.New(db, ""); err == nil {
			d = x
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return New(context.Background(), d, opts...)
}

func testOpenPool(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	d, err := postgres.NewPool(pool, "")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return New(context.Background(), d, opts...)
}
