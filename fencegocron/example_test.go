package fencegocron_test

import (
	"context"
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencegocron"
)

// Every replica runs this; each minute's report is written by one of them,
// and a replica that lost its lease mid-run cannot overwrite a newer one.
func ExampleLocker() {
	ctx := context.Background()
	store, err := fence.Open(ctx, "sqlite:fence.db")
	if err != nil {
		log.Fatal(err)
	}
	locker, err := fencegocron.NewLocker(store, fencegocron.WithMinHold(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	sched, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	_, err = sched.NewJob(gocron.CronJob("* * * * *", false),
		gocron.NewTask(locker.Job(func(ctx context.Context, tok fence.Token) error {
			_, err := store.Exec(ctx, tok, `UPDATE reports SET body = ?, fence = ? WHERE id = 1 AND {{fence}}`, "…", tok.Fence)
			return err // wraps fence.ErrLost if another replica took over
		})),
		gocron.WithName("report"))
	if err != nil {
		log.Fatal(err)
	}
	sched.Start()
	defer sched.Shutdown()
	select {}
}

// Only the leader runs the scheduler's jobs; leader-only writes carry the
// term's token.
func ExampleElector() {
	ctx := context.Background()
	store, err := fence.Open(ctx, "sqlite:fence.db")
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
