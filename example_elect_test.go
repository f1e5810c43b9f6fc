package fence_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// The sample of README.md's "Leader election" and of the package doc, word
// for word (TestDocSamplesAreCompiled). Example_leadReports runs it on
// SQLite; TestSampleLeadReports on PostgreSQL and MySQL too.

// leadReports writes the report while this replica leads "report:leader"
// among the replicas that share store, and campaigns again whenever it
// stops leading, until ctx ends. Each term has its own token: a leader
// that paused past its TTL cannot overwrite its successor's report.
func leadReports(ctx context.Context, store *fence.Store, me string, report func() string) error {
	return fence.Elect(ctx, store, "report:leader", fence.ElectionCallbacks{
		OnStartedLeading: func(ctx context.Context, tok fence.Token) {
			// ctx ends when the term does: before the lease can lapse.
			for ctx.Err() == nil {
				_, err := store.Exec(ctx, tok,
					`UPDATE reports SET body = ?, author = ? WHERE id = 1 AND {{fence}}`, report(), me)
				if err != nil {
					log.Printf("report not written: %v", err) // fence.ErrLost once a newer leader took over
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Minute):
				}
			}
		},
		OnNewLeader: func(leader string, term int64) {
			log.Printf("leader of report:leader: %s (fence %d)", leader, term)
		},
	}, fence.WithTTL(15*time.Second))
}

func Example_leadReports() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dsn, db, cleanup := exampleDB("reports.db")
	defer cleanup()
	if _, err := db.Exec(`CREATE TABLE reports (id INTEGER PRIMARY KEY, body TEXT NOT NULL, author TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO reports VALUES (1, '', '')`); err != nil {
		log.Fatal(err)
	}
	store, err := fencedsn.Open(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { done <- leadReports(ctx, store, "replica-1", func() string { return "all green" }) }()
	var body, author string
	for author == "" {
		if err := db.QueryRow(`SELECT body, author FROM reports WHERE id = 1`).Scan(&body, &author); err != nil {
			log.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	fmt.Println(body, "by", author, <-done)
	info, _ := store.Get(context.Background(), "report:leader")
	fmt.Println("lease", info.State)
	// Output:
	// all green by replica-1 context canceled
	// lease released
}
