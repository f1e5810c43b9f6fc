package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fencehttp"
	"github.com/fencekit/fence/fenceotel"
	"github.com/fencekit/fence/fencepgx"
	"github.com/fencekit/fence/fenceprom"
	"github.com/fencekit/fence/postgres"
	"github.com/fencekit/fence/sqlite"
	"github.com/fencekit/fence/task"
)

// The functions of this file are the Go samples of README.md and of the
// package doc, word for word (TestDocSamplesAreCompiled). The Examples run
// them on SQLite; docs_samples_test.go runs them on PostgreSQL and MySQL.

// assign gives item id to owner, as the singleton job "admin:reconciliation"
// of every replica that shares the database at dsn: "sqlite:fence.db",
// "postgres://app@db/app" or "mysql://app@db:3306/app".
func assign(ctx context.Context, dsn string, id int, owner string) (fence.Result, error) {
	store, err := fencedsn.Open(ctx, dsn)
	if err != nil {
		return fence.Result{}, err
	}
	defer store.Close()
	if _, err := store.Migrate(ctx); err != nil {
		return fence.Result{}, err
	}
	return fence.Run(ctx, store, "admin:reconciliation", func(ctx context.Context) error {
		tok, _ := fence.TokenFrom(ctx)
		// The fence predicate goes where {{fence}} stands: check and write are one statement.
		_, err := store.Exec(ctx, tok,
			`UPDATE items SET owner = ? WHERE id = ? AND {{fence}}`, owner, id)
		return err // errors.Is(err, fence.ErrLost) once a newer owner took over
	}, fence.WithTTL(30*time.Second))
	// Result.Outcome: completed, failed, not-acquired, lost or rejected
}

// assignPgx is assign for a program that uses pgx without database/sql
// (tables created by store.Migrate or the files of migrations/).
func assignPgx(ctx context.Context, pool *pgxpool.Pool, id int, owner string) error {
	drv, err := postgres.NewPool(pool, "") // the pool stays yours: Close does not close it
	if err != nil {
		return err
	}
	store, err := fence.New(ctx, drv)
	if err != nil {
		return err
	}
	l, err := store.Acquire(ctx, "admin:reconciliation", 30*time.Second)
	if err != nil {
		return err // errors.Is(err, fence.ErrHeld): another replica holds it
	}
	defer store.Release(context.WithoutCancel(ctx), l.Token)
	return fencepgx.InTx(ctx, store, pool, l.Token, func(tx pgx.Tx) error { // lease row share-locked, token checked
		_, err := fencepgx.Exec(ctx, store, tx, l.Token,
			`UPDATE items SET owner = $1 WHERE id = $2 AND {{fence}}`, owner, id)
		return err
	})
}

// openPostgres makes a store for a program that knows its database: only
// the chosen driver's package is linked (no SQLite, no MySQL).
func openPostgres(ctx context.Context, db *sql.DB) (*fence.Store, error) {
	drv, err := postgres.New(db, "") // db from postgres.Open(dsn), or your own pgx stdlib handle
	if err != nil {
		return nil, err
	}
	return fence.New(ctx, drv) // checks the session settings once
}

// replan switches a task's model midway: the first plan's late step is
// refused, and only the current epoch can complete the task.
func replan(ctx context.Context, store *fence.Store) error {
	ts, err := task.New(store) // tables come with store.Migrate
	if err != nil {
		return err
	}
	if err := ts.Create(ctx, "t-42", task.Plan{Model: "small", Text: "search, then read"}); err != nil {
		return err
	}
	e1, err := ts.Start(ctx, "t-42") // this executor holds the task at epoch e1.Number()
	if err != nil {
		return err
	}
	// A step's result is stored once per (task, epoch, step).
	if _, err := ts.RecordStep(ctx, e1, "search", []string{"doc-1", "doc-2"}); err != nil {
		return err
	}
	e2, err := ts.Replan(ctx, "t-42", task.Plan{Model: "large", Text: "read doc-2"}) // a higher epoch
	if err != nil {
		return err
	}
	_, err = ts.RecordStep(ctx, e1, "read", "doc-1 says no")
	fmt.Println("old plan's step refused:", errors.Is(err, fence.ErrLost))
	return ts.Complete(ctx, e2, "doc-2 says yes") // only the current epoch can finish
}

// publish is the holder: every request made inside the job carries the
// signed fence.
func publish(ctx context.Context, store *fence.Store, key []byte, url string) (fence.Result, error) {
	c := fencehttp.Client(key, nil)
	return fence.Run(ctx, store, "publisher", func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("hello"))
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := fencehttp.CheckResponse(resp); err != nil {
			return err // 412 is fence.ErrStale: a newer fence published; do not retry
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("publish: %s", resp.Status)
		}
		return nil
	})
}

// receiver is the service: the handler's write commits in the transaction
// that raised the lease's fence row, or not at all.
func receiver(ctx context.Context, db *sql.DB, key []byte) (*http.ServeMux, error) {
	v, err := fencehttp.NewVerifier(key, func(*http.Request) string { return "publisher" })
	if err != nil {
		return nil, err
	}
	g, err := fencehttp.NewGuard(v, db, fence.Postgres, "publish_fences")
	if err != nil {
		return nil, err
	}
	if err := g.CreateTable(ctx); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /publish", g.Handler(func(w http.ResponseWriter, r *http.Request, tx *sql.Tx) error {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(r.Context(), `UPDATE feed SET body = $1`, body)
		return err // nil commits the write and the fence together
	}))
	return mux, nil
}

// observed runs job with Prometheus metrics (registered in reg) and
// OpenTelemetry spans (to the global TracerProvider).
func observed(ctx context.Context, dsn string, reg prometheus.Registerer, job fence.Job) (fence.Result, error) {
	m := fenceprom.New() // fenceprom.WithoutLeaseLabel() for many lease names
	if err := reg.Register(m); err != nil {
		return fence.Result{}, err
	}
	store, err := fencedsn.Open(ctx, dsn, fence.WithObserver(m), fence.WithObserver(fenceotel.New(nil)))
	if err != nil {
		return fence.Result{}, err
	}
	defer store.Close()
	if _, err := store.Migrate(ctx); err != nil {
		return fence.Result{}, err
	}
	return fence.Run(ctx, store, "nightly", job)
}

// exampleDB makes a SQLite file for an example, in a directory of its own.
func exampleDB(name string) (dsn string, db *sql.DB, cleanup func()) {
	dir, err := os.MkdirTemp("", "fence-example-")
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(dir, name)
	db, err = sqlite.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	return "sqlite:" + path, db, func() { db.Close(); os.RemoveAll(dir) }
}

func Example_assign() {
	ctx := context.Background()
	dsn, db, cleanup := exampleDB("app.db")
	defer cleanup()
	if _, err := db.Exec(`CREATE TABLE items (id INTEGER PRIMARY KEY, owner TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO items VALUES (1, '')`); err != nil {
		log.Fatal(err)
	}

	res, err := assign(ctx, dsn, 1, "alice")
	if err != nil {
		log.Fatal(err)
	}
	var owner string
	if err := db.QueryRow(`SELECT owner FROM items WHERE id = 1`).Scan(&owner); err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Outcome, owner)
	// Output: completed alice
}

func Example_replan() {
	ctx := context.Background()
	dsn, _, cleanup := exampleDB("tasks.db")
	defer cleanup()
	store, err := fencedsn.Open(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if err := replan(ctx, store); err != nil {
		log.Fatal(err)
	}
	ts, _ := task.New(store)
	t, err := ts.Get(ctx, "t-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.State, t.Plan.Model, t.Summary)
	// Output:
	// old plan's step refused: true
	// succeeded large doc-2 says yes
}

func Example_observed() {
	ctx := context.Background()
	dsn, _, cleanup := exampleDB("app.db")
	defer cleanup()
	store, err := fencedsn.Open(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	store.Close()

	reg := prometheus.NewRegistry()
	res, err := observed(ctx, dsn, reg, func(ctx context.Context) error { return nil })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Outcome, gathered(reg, "fence_run_starts_total"), gathered(reg, "fence_runs_finished_total"))
	// Output: completed 1 1
}

// gathered sums the samples of the counter family name in reg.
func gathered(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
