package task

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The task tables' unfenced statements (create, cancel after a revoke,
// reads) run on whichever handle the core store has: its database/sql
// handle, or its pgx pool for a driver made by postgres.NewPool. Fenced
// writes go through fence.Store.Exec, which already serves both.

// pool is the pgx pool of a store whose driver runs on one, or nil.
func (s *Store) pool() *pgxpool.Pool {
	if d, ok := s.fs.Driver().(interface{ Pool() *pgxpool.Pool }); ok {
		return d.Pool()
	}
	return nil
}

func (s *Store) exec(ctx context.Context, q string, args ...any) (int64, error) {
	if p := s.pool(); p != nil {
		tag, err := p.Exec(ctx, q, args...)
		return tag.RowsAffected(), err
	}
	res, err := s.fs.DB().ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

type scanner interface{ Scan(dest ...any) error }

// queryRow's Scan reports sql.ErrNoRows for no row on either handle (pgx's
// ErrNoRows matches it with errors.Is, and is translated anyway so that the
// callers need to know only one).
func (s *Store) queryRow(ctx context.Context, q string, args ...any) scanner {
	if p := s.pool(); p != nil {
		return pgxRow{p.QueryRow(ctx, q, args...)}
	}
	return s.fs.DB().QueryRowContext(ctx, q, args...)
}

type pgxRow struct{ r pgx.Row }

func (r pgxRow) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sql.ErrNoRows
	}
	return err
}

type rowIter interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// query returns the rows and a function that closes them.
func (s *Store) query(ctx context.Context, q string, args ...any) (rowIter, func(), error) {
	if p := s.pool(); p != nil {
		rows, err := p.Query(ctx, q, args...)
		if err != nil {
			return nil, nil, err
		}
		return rows, rows.Close, nil
	}
	rows, err := s.fs.DB().QueryContext(ctx, q, args...)
	if err != nil {
		return nil, nil, err
	}
	return rows, func() { rows.Close() }, nil
}
