package main

import (
	"database/sql"
	"slices"
	"testing"
)

// A PostgreSQL-only program registers pgx's database/sql driver and no
// other: when the root package opened every dialect, importing it
// registered "sqlite" and "mysql" globally too.
func TestPostgresOnlyRegistersNoOtherDriver(t *testing.T) {
	drivers := sql.Drivers()
	if !slices.Contains(drivers, "pgx") {
		t.Errorf("sql.Drivers() = %v, want pgx among them", drivers)
	}
	for _, other := range []string{"sqlite", "sqlite3", "mysql"} {
		if slices.Contains(drivers, other) {
			t.Errorf("sql.Drivers() = %v: a PostgreSQL-only program registered %q", drivers, other)
		}
	}
}
