// Command firstjob is the README's first fenced job. Run it on as many
// machines (or terminals) at once as you like: one of them holds the lease
// "nightly-report" and writes the report, and a write from a process that
// lost the lease meanwhile is refused by the database.
//
//	go run ./examples/firstjob                    # SQLite: the file fence.db here
//	DATABASE_URL='postgres://…' go run ./examples/firstjob
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/postgres"
	"github.com/fencekit/fence/sqlite"
)

func main() {
	if err := run(context.Background(), os.Getenv("DATABASE_URL")); err != nil {
		fmt.Fprintln(os.Stderr, "firstjob:", err)
		os.Exit(1)
	}
}

// open returns a store on PostgreSQL when dsn is set, else on the SQLite
// file fence.db. The store owns the driver's handle: close the store, never
// the driver.
func open(ctx context.Context, dsn string) (*fence.Store, error) {
	var drv fence.Driver
	var err error
	if dsn != "" {
		drv, err = postgres.OpenDriver(dsn, "")
	} else {
		drv, err = sqlite.OpenDriver("fence.db", "")
	}
	if err != nil {
		return nil, err
	}
	store, err := fence.New(ctx, drv)
	if err != nil {
		drv.Close()
		return nil, err
	}
	return store, nil
}

// nightlyReport is the job: the replica that holds the lease writes the
// report, and the database checks its token in the same statement.
func nightlyReport(ctx context.Context, store *fence.Store) (fence.Result, error) {
	return fence.Run(ctx, store, "nightly-report", func(ctx context.Context) error {
		tok, _ := fence.TokenFrom(ctx)
		_, err := store.Exec(ctx, tok,
			`UPDATE reports SET body = ?, fence = ? WHERE id = 1 AND {{fence}}`, "all good", tok.Fence)
		return err // errors.Is(err, fence.ErrLost) once a newer owner took over: nothing was written
	}, fence.WithTTL(30*time.Second))
}

func run(ctx context.Context, dsn string) error {
	store, err := open(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	if _, err := store.Migrate(ctx); err != nil { // fence's tables
		return err
	}
	for _, q := range []string{ // the job's own table
		`CREATE TABLE IF NOT EXISTS reports (id INT PRIMARY KEY, body TEXT NOT NULL, fence BIGINT NOT NULL)`,
		`INSERT INTO reports (id, body, fence) VALUES (1, '', 0) ON CONFLICT DO NOTHING`,
	} {
		if _, err := store.DB().ExecContext(ctx, q); err != nil {
			return err
		}
	}
	res, err := nightlyReport(ctx, store)
	fmt.Printf("nightly-report: %s (fence %d)\n", res.Outcome, res.Token.Fence)
	return err // fence.ErrHeld: another process is running it now
}
