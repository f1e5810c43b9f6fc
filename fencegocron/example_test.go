package fencegocron_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fencegocron"
)

// scheduleReport runs on every replica: each minute's report is written by
// one of them, and a replica that lost its lease mid-run cannot overwrite a
// newer one. Stop the scheduler with Shutdown.
func scheduleReport(store *fence.Store, body string) (gocron.Scheduler, error) {
	locker, err := fencegocron.NewLocker(store, fencegocron.WithMinHold(30*time.Second))
	if err != nil {
		return nil, err
	}
	sched, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		return nil, err
	}
	_, err = sched.NewJob(gocron.CronJob("* * * * *", false),
		gocron.NewTask(locker.Job(func(ctx context.Context, tok fence.Token) error {
			_, err := store.Exec(ctx, tok,
				`UPDATE reports SET body = ? WHERE id = 1 AND {{fence}}`, body)
			return err // wraps fence.ErrLost if another replica took over
		})),
		gocron.WithName("report")) // the lease is "gocron:report"
	if err != nil {
		return nil, err
	}
	sched.Start()
	return sched, nil
}

// The package doc's sample, run at once instead of at the next minute.
func ExampleLocker() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fencegocron-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := fencedsn.Open(ctx, "sqlite:"+filepath.Join(dir, "fence.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := store.DB().Exec(`CREATE TABLE reports (id INTEGER PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if _, err := store.DB().Exec(`INSERT INTO reports VALUES (1, '')`); err != nil {
		log.Fatal(err)
	}

	sched, err := scheduleReport(store, "all good")
	if err != nil {
		log.Fatal(err)
	}
	defer sched.Shutdown()
	if err := sched.Jobs()[0].RunNow(); err != nil {
		log.Fatal(err)
	}
	var body string
	for deadline := time.Now().Add(time.Minute); body == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err := store.DB().QueryRow(`SELECT body FROM reports WHERE id = 1`).Scan(&body); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(body)
	// Output: all good
}

// Only the leader runs the scheduler's jobs; leader-only writes carry the
// term's token.
func ExampleElector() {
	ctx := context.Background()
	store, err := fencedsn.Open(ctx, "sqlite:fence.db")
	if err != nil {
		log.Fatal(err)
	}
	elector, err := fencegocron.NewElector(store, "billing-leader")
	if err != nil {
		log.Fatal(err)
	}
	go elector.Run(ctx) // steps down, releasing the lease, when ctx ends
	sched, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	_, err = sched.NewJob(gocron.DurationJob(10*time.Second),
		gocron.NewTask(elector.Job(func(ctx context.Context, tok fence.Token) error {
			_, err := store.Exec(ctx, tok, `UPDATE invoices SET state = 'sent' WHERE state = 'due' AND {{fence}}`)
			return err
		})))
	if err != nil {
		log.Fatal(err)
	}
	sched.Start()
	defer sched.Shutdown()
	select {}
}
