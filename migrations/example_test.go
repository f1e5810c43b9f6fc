package migrations_test

import (
	"context"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"

	"github.com/pressly/goose/v3"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/migrations"
	"github.com/fencekit/fence/sqlite"
)

// Apply fence's goose migrations from the embedded files, with a version
// table of their own, then use the store without calling Migrate.
func ExampleFS_goose() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fence-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	files, err := fs.Sub(migrations.FS, "goose/sqlite")
	if err != nil {
		log.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, files, goose.WithTableName("fence_goose_db_version"))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		log.Fatal(err)
	}

	store, err := fencedsn.OpenDB(context.Background(), db, fence.SQLite) // default prefix fence_
	if err != nil {
		log.Fatal(err)
	}
	v, err := store.SchemaVersion(ctx)
	if err != nil {
		log.Fatal(err)
	}
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fence and goose agree on the version:", int64(v) == current)
	// Output: fence and goose agree on the version: true
}
