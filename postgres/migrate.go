package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Migrate applies the migrations newer than the recorded version, in one
// transaction, and returns the schema version. It is idempotent, and safe when
// several processes run it at once: the transaction takes an advisory lock
// before it reads the version, so the second process waits and then finds
// nothing to do. PostgreSQL's DDL is transactional, so a failed migration
// leaves neither its tables nor its version row behind.
func (d *Driver) Migrate(ctx context.Context) (version int, err error) {
	tx, err := d.c.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.rollback(ctx)
		}
	}()
	if _, err := tx.exec(ctx, d.q.schemaLock, "fence.migrate."+d.prefix); err != nil {
		return 0, fmt.Errorf("postgres: migrate: lock: %w", err)
	}
	if _, err := tx.exec(ctx, d.q.schemaCreate); err != nil {
		return 0, fmt.Errorf("postgres: migrate: schema table: %w", err)
	}
	if err := tx.queryRow(ctx, d.q.schemaVersion).Scan(&version); err != nil {
		return 0, fmt.Errorf("postgres: migrate: read version: %w", err)
	}
	for _, m := range d.q.migrations {
		if m.Version <= version {
			continue
		}
		if _, err := tx.exec(ctx, m.SQL); err != nil {
			return 0, fmt.Errorf("postgres: migrate: %s: %w", m.Name, err)
		}
		if _, err := tx.exec(ctx, d.q.schemaRecord, m.Version); err != nil {
			return 0, fmt.Errorf("postgres: migrate: record %s: %w", m.Name, err)
		}
		version = m.Version
	}
	if err := tx.commit(ctx); err != nil {
		return 0, fmt.Errorf("postgres: migrate: commit: %w", err)
	}
	return version, nil
}

// SchemaVersion returns the highest applied migration, 0 when Migrate has
// never run (no schema table).
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := d.c.queryRow(ctx, d.q.schemaVersion).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return 0, nil
	}
	return v, err
}
