package migrations_test

import (
	"errors"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	mmysql "github.com/golang-migrate/migrate/v4/database/mysql"
	mpgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	msqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/migrations"
)

// TestGolangMigrateTool runs the golang-migrate files with golang-migrate
// itself (its pgx/v5, mysql and sqlite drivers over the scratch handle): up
// to the latest version, a no-op second up, all the way down, and up again.
// TestGolangMigrate applies the same files by hand, one Exec per file, and
// says what a driver must accept; this says the tool accepts them.
func TestGolangMigrateTool(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db := scratch(t, b, true)
		var (
			drv database.Driver
			err error
		)
		switch b.dialect {
		case fence.Postgres:
			drv, err = mpgx.WithInstance(db, &mpgx.Config{})
		case fence.MySQL:
			drv, err = mmysql.WithInstance(db, &mmysql.Config{})
		default:
			drv, err = msqlite.WithInstance(db, &msqlite.Config{})
		}
		if err != nil {
			t.Fatalf("golang-migrate %s driver: %v", b.name, err)
		}
		src, err := iofs.New(migrations.FS, "golang-migrate/"+b.name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := migrate.NewWithInstance("iofs", src, b.name, drv)
		if err != nil {
			t.Fatal(err)
		}
		want := latest(t, "golang-migrate/"+b.name)
		if err := m.Up(); err != nil {
			t.Fatalf("up: %v", err)
		}
		if v, dirty, err := m.Version(); err != nil || dirty || int(v) != want {
			t.Fatalf("after up: version %d dirty %v (%v), want %d", v, dirty, err, want)
		}
		if err := m.Up(); !errors.Is(err, migrate.ErrNoChange) {
			t.Fatalf("second up: %v, want ErrNoChange", err)
		}
		checkStore(t, db, b, "golang-migrate/"+b.name)
		if err := m.Down(); err != nil {
			t.Fatalf("down: %v", err)
		}
		// golang-migrate's own version table stays; fence's are gone.
		if left := fenceTables(t, db, b.dialect); len(left) > 0 {
			t.Fatalf("tables left after down: %v", left)
		}
		if err := m.Up(); err != nil {
			t.Fatalf("up after down: %v", err)
		}
		checkStore(t, db, b, "golang-migrate/"+b.name)
	})
}
