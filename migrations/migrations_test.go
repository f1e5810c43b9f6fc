package migrations_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/migrations"
	"github.com/fencekit/fence/mysql"
	"github.com/fencekit/fence/postgres"
	"github.com/fencekit/fence/sqlite"
)

// The files name their tables with the fixed prefix fence_, so every test
// runs in a scratch database of its own (a SQLite file, a PostgreSQL schema
// on the search_path, a MariaDB database), created and dropped here.

type backend struct {
	name    string
	dialect fence.Dialect
	goose   goose.Dialect
}

var backends = []backend{
	{"sqlite", fence.SQLite, goose.DialectSQLite3},
	{"postgres", fence.Postgres, goose.DialectPostgres},
	{"mysql", fence.MySQL, goose.DialectMySQL},
}

func each(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

func scratchName() string {
	var b [5]byte
	rand.Read(b[:])
	return "fence_goose_" + hex.EncodeToString(b[:])
}

// scratch returns a handle on an empty database of b's kind, dropped at
// cleanup. multi allows several statements in one Exec on MySQL, as
// golang-migrate's mysql driver requires (multiStatements=true).
func scratch(t *testing.T, b backend, multi bool) *sql.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := scratchName()
	switch b.dialect {
	case fence.SQLite:
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "fence.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	case fence.Postgres:
		base := open(t, b, testdb.PostgresDSN(), postgres.Open)
		if _, err := base.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := base.ExecContext(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
				t.Errorf("dropping scratch schema %s: %v", name, err)
			}
		})
		u := parseURL(t, testdb.PostgresDSN())
		q := u.Query()
		q.Set("search_path", name)
		u.RawQuery = q.Encode()
		return open(t, b, u.String(), postgres.Open)
	default:
		base := open(t, b, testdb.MySQLDSN(), mysql.Open)
		if _, err := base.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := base.ExecContext(context.Background(), "DROP DATABASE `"+name+"`"); err != nil {
				t.Errorf("dropping scratch database %s: %v", name, err)
			}
		})
		u := parseURL(t, testdb.MySQLDSN())
		u.Path = "/" + name
		if multi {
			q := u.Query()
			q.Set("multiStatements", "true")
			u.RawQuery = q.Encode()
		}
		return open(t, b, u.String(), mysql.Open)
	}
}

func parseURL(t *testing.T, dsn string) *url.URL {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("test DSN of %T is not a URL", err) // not echoed: it may hold a password
	}
	return u
}

// open opens and pings dsn; an unreachable server skips the test (or fails
// it under FENCE_REQUIRE_DBS=1). Cleanups run last-in first-out, so a handle
// opened after another closes before it.
func open(t *testing.T, b backend, dsn string, openFn func(string) (*sql.DB, error)) *sql.DB {
	t.Helper()
	db, err := openFn(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		env := map[fence.Dialect]string{fence.Postgres: "FENCE_TEST_POSTGRES", fence.MySQL: "FENCE_TEST_MYSQL"}[b.dialect]
		testdb.Unreachable(t, b.name, env, err)
	}
	return db
}

func sub(t *testing.T, dir string) fs.FS {
	t.Helper()
	f, err := fs.Sub(migrations.FS, dir)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// latest is the highest version among the files of dir.
func latest(t *testing.T, dir string) int {
	t.Helper()
	names, err := fs.Glob(migrations.FS, dir+"/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations in %s (%v)", dir, err)
	}
	var v int
	fmt.Sscanf(path.Base(names[len(names)-1]), "%04d", &v)
	return v
}

// count is the number of versions among the files of dir: fewer than the
// latest when a dialect skips a number (SQLite has no version 4, and none
// has 5 yet).
func count(t *testing.T, dir string) int {
	t.Helper()
	names, err := fs.Glob(migrations.FS, dir+"/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range names {
		seen[path.Base(n)[:4]] = true
	}
	return len(seen)
}

// checkStore opens a fence store over the tables migrated from dir and
// checks the recorded version, that Migrate is a no-op, and a lease round
// trip.
func checkStore(t *testing.T, db *sql.DB, b backend, dir string) {
	t.Helper()
	want, versions := latest(t, dir), count(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := fencedsn.OpenDB(context.Background(), db, b.dialect, fence.WithPrefix("fence_"))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != want {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, want)
	}
	if v, err := s.Migrate(ctx); err != nil || v != want {
		t.Fatalf("Migrate after the tool = %d, %v; want %d (nothing to do)", v, err, want)
	}
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM fence_schema").Scan(&rows); err != nil || rows != versions {
		t.Fatalf("fence_schema has %d rows (%v), want %d: Migrate must not have re-applied anything", rows, err, versions)
	}
	l, err := s.Acquire(ctx, "goose-check", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.StartRun(ctx, l.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, l.Token, id, fence.Completion{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "goose-check", time.Second); err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
}

// fenceTables lists the tables whose names start with fence_.
func fenceTables(t *testing.T, db *sql.DB, d fence.Dialect) []string {
	t.Helper()
	q := map[fence.Dialect]string{
		fence.SQLite:   `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'fence\_%' ESCAPE '\'`,
		fence.Postgres: `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE 'fence\_%'`,
		fence.MySQL:    `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'fence\_%'`,
	}[d]
	return strings.Fields(strings.Join(queryStrings(t, db, q), " "))
}

func queryStrings(t *testing.T, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = v.String
			if !v.Valid {
				parts[i] = "NULL"
			}
		}
		out = append(out, strings.Join(parts, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func TestGoose(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db := scratch(t, b, false)
		dir := "goose/" + b.name
		want := count(t, dir)
		p, err := goose.NewProvider(b.goose, db, sub(t, dir))
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Up(ctx)
		if err != nil {
			t.Fatalf("goose up: %v", err)
		}
		if len(res) != want {
			t.Fatalf("goose applied %d migrations, want %d", len(res), want)
		}
		checkStore(t, db, b, dir)

		if _, err := p.DownTo(ctx, 0); err != nil {
			t.Fatalf("goose down: %v", err)
		}
		if left := fenceTables(t, db, b.dialect); len(left) > 0 {
			t.Fatalf("tables left after goose down to 0: %v", left)
		}
		// Down leaves nothing that stops the next Up.
		if _, err := p.Up(ctx); err != nil {
			t.Fatalf("goose up after down: %v", err)
		}
		checkStore(t, db, b, dir)
	})
}

// TestGolangMigrate applies the golang-migrate files as golang-migrate's
// drivers do: each file in one Exec, ups in version order, downs in reverse.
func TestGolangMigrate(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db := scratch(t, b, true)
		dir := "golang-migrate/" + b.name
		ups, _ := fs.Glob(migrations.FS, dir+"/*.up.sql")
		downs, _ := fs.Glob(migrations.FS, dir+"/*.down.sql")
		if len(ups) == 0 || len(ups) != len(downs) {
			t.Fatalf("%d up and %d down files in %s", len(ups), len(downs), dir)
		}
		exec := func(f string) {
			t.Helper()
			text, err := fs.ReadFile(migrations.FS, f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, string(text)); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
		for _, f := range ups {
			exec(f)
		}
		checkStore(t, db, b, dir)
		for _, f := range slices.Backward(downs) {
			exec(f)
		}
		if left := fenceTables(t, db, b.dialect); len(left) > 0 {
			t.Fatalf("tables left after the down files: %v", left)
		}
	})
}

// TestSchemaMatchesMigrate compares the tables goose creates with the ones
// Store.Migrate creates: columns, types, defaults, indexes, constraints.
func TestSchemaMatchesMigrate(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		byGoose, byMigrate := scratch(t, b, false), scratch(t, b, false)
		p, err := goose.NewProvider(b.goose, byGoose, sub(t, "goose/"+b.name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Up(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := fencedsn.OpenDB(context.Background(), byMigrate, b.dialect, fence.WithPrefix("fence_"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		got, want := describe(t, byGoose, b.dialect), describe(t, byMigrate, b.dialect)
		if len(want) < 10 {
			t.Fatalf("the schema description is too short to mean anything: %q", want)
		}
		if !slices.Equal(got, want) {
			for _, l := range got {
				if !slices.Contains(want, l) {
					t.Errorf("only with goose:   %s", l)
				}
			}
			for _, l := range want {
				if !slices.Contains(got, l) {
					t.Errorf("only with Migrate: %s", l)
				}
			}
		}
	})
}

// describe lists every column, index and constraint of the fence_ tables.
func describe(t *testing.T, db *sql.DB, d fence.Dialect) []string {
	t.Helper()
	var out []string
	switch d {
	case fence.SQLite:
		// The stored CREATE statements, and each column as SQLite sees it.
		out = queryStrings(t, db, `SELECT type, name, tbl_name, sql FROM sqlite_master WHERE tbl_name LIKE 'fence\_%' ESCAPE '\'`)
		for _, tb := range fenceTables(t, db, d) {
			for _, c := range queryStrings(t, db, `SELECT cid, name, type, "notnull", dflt_value, pk FROM pragma_table_info(?)`, tb) {
				out = append(out, tb+": "+c)
			}
		}
	case fence.Postgres:
		out = queryStrings(t, db, `
SELECT table_name, column_name, ordinal_position, data_type, character_maximum_length, is_nullable,
       column_default, collation_name, is_identity, identity_generation
FROM information_schema.columns WHERE table_schema = current_schema() AND table_name LIKE 'fence\_%'`)
		out = append(out, queryStrings(t, db, `
SELECT tablename, indexname, replace(indexdef, current_schema() || '.', '')
FROM pg_indexes WHERE schemaname = current_schema() AND tablename LIKE 'fence\_%'`)...)
		out = append(out, queryStrings(t, db, `
SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid)
FROM pg_constraint WHERE connamespace = current_schema()::regnamespace AND conrelid::regclass::text LIKE 'fence\_%'`)...)
	case fence.MySQL:
		out = queryStrings(t, db, `
SELECT table_name, column_name, ordinal_position, column_type, is_nullable, column_default,
       character_set_name, collation_name, extra
FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name LIKE 'fence\_%'`)
		out = append(out, queryStrings(t, db, `
SELECT table_name, engine, table_collation
FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'fence\_%'`)...)
		out = append(out, queryStrings(t, db, `
SELECT table_name, index_name, seq_in_index, column_name, non_unique
FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name LIKE 'fence\_%'`)...)
	}
	slices.Sort(out)
	return out
}
