package fencedsn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/mysql"
	"github.com/fencekit/fence/postgres"
	"github.com/fencekit/fence/sqlite"
)

// Open opens a store from a DSN:
//
//	sqlite:PATH             (sqlite::memory: for a private in-memory database)
//	postgres://… or postgresql://…
//	mysql://user:pass@host:port/db?param=value
//
// It forces the session settings fence relies on (mysql.Open,
// postgres.NewConnector, sqlite.Open list them), refuses a DSN that sets
// them otherwise (and a MySQL DSN parameter outside go-sql-driver's known
// options) with an error wrapping fence.ErrInvalid, and checks the first
// connection as fence.New does. The store owns the handle: its pool is
// bounded (fence.WithMaxOpenConns) and Close closes it. An unreachable
// database gives an error wrapping fence.ErrUnavailable. Errors never
// contain the DSN's password or secret parameters.
func Open(ctx context.Context, dsn string, opts ...fence.Option) (*fence.Store, error) {
	d, err := Parse(dsn)
	if err != nil {
		return nil, err
	}
	var drv fence.Driver
	switch d.Dialect {
	case fence.SQLite:
		drv, err = nilIfErr(sqlite.OpenDriver(d.Path, ""))
	case fence.Postgres:
		drv, err = nilIfErr(postgres.OpenDriver(dsn, ""))
	case fence.MySQL:
		drv, err = nilIfErr(mysql.OpenDriver(dsn, ""))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: opening %s: %v", fence.ErrInvalid, d.Redacted, scrub(err, d))
	}
	s, err := fence.New(ctx, drv, opts...)
	if err != nil {
		drv.Close()
		return nil, scrubErr(err, d)
	}
	return s, nil
}

// nilIfErr keeps a typed nil driver out of the interface.
func nilIfErr[D fence.Driver](d D, err error) (fence.Driver, error) {
	if err != nil {
		return nil, err
	}
	return d, nil
}

// OpenDB returns a store over a handle the caller keeps (Close does not
// close it), choosing the driver by dialect: for a program that opened its
// *sql.DB itself and learns the dialect at run time. A program that knows
// its database calls that driver's New and fence.New.
func OpenDB(ctx context.Context, db *sql.DB, dialect fence.Dialect, opts ...fence.Option) (*fence.Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", fence.ErrInvalid)
	}
	var (
		drv fence.Driver
		err error
	)
	switch dialect {
	case fence.SQLite:
		drv, err = nilIfErr(sqlite.New(db, ""))
	case fence.Postgres:
		drv, err = nilIfErr(postgres.New(db, ""))
	case fence.MySQL:
		drv, err = nilIfErr(mysql.New(db, ""))
	default:
		return nil, fmt.Errorf("%w: unknown dialect %q (want sqlite, postgres or mysql)", fence.ErrInvalid, dialect)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", fence.ErrInvalid, err)
	}
	return fence.New(ctx, drv, opts...)
}

// scrubErr is scrub for an error that wraps a sentinel, keeping the chain.
func scrubErr(err error, d DSN) error {
	if msg := scrub(err, d); msg != err.Error() {
		for _, sentinel := range []error{fence.ErrInvalid, fence.ErrUnavailable} {
			if errors.Is(err, sentinel) {
				return fmt.Errorf("%w: %s", sentinel, msg)
			}
		}
		return errors.New(msg)
	}
	return err
}
