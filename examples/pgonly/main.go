// Command pgonly is a PostgreSQL-only program: it imports fence and
// fence/postgres and nothing else of fence's, so its binary carries pgx and
// not SQLite or MySQL (TestImportLinksOnlyTheChosenDriver). It takes the
// lease named by -lease once, prints the token and releases it.
//
//	go run ./examples/pgonly -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/postgres"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("FENCE_DSN"), "postgres:// DSN")
	lease := flag.String("lease", "pgonly", "lease name")
	flag.Parse()
	if err := run(context.Background(), *dsn, *lease); err != nil {
		fmt.Fprintln(os.Stderr, "pgonly:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn, lease string) error {
	drv, err := postgres.OpenDriver(dsn, "") // the store owns this handle
	if err != nil {
		return err
	}
	store, err := fence.New(ctx, drv)
	if err != nil {
		drv.Close()
		return err
	}
	defer store.Close()
	if _, err := store.Migrate(ctx); err != nil {
		return err
	}
	l, err := store.Acquire(ctx, lease, 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Println(l.Token)
	return store.Release(ctx, l.Token)
}
