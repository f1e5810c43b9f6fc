package cli

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite", to hold the write lock
)

// An acquire that itself waited (here behind another connection's write
// lock) for longer than a third of the TTL leaves too little proven time
// for the command: fence run must not start it, and must say why with 76.
// (The old fence run started it and killed it moments later, or let it run
// on a lease it could not prove.)
func TestRunRefusesToStartAfterSlowAcquire(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	b := sqliteOnly(t)
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(b.dir, "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(b.dir, "ran")
	p := b.start(t, "run", "--lease", "slow", "--ttl", "3s", "--", "sh", "-c", "touch "+ran)
	// The lock is the cause, not a wait for a condition: fence's acquire
	// queues behind it (busy_timeout) for well over TTL/3 = 1s.
	time.Sleep(3 * time.Second)
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	r := p.wait(time.Minute)
	if r.code != ExitLost {
		t.Fatalf("want 76 after a slow acquire: %v", r)
	}
	// Who notices first is a race that both sides win honestly: fence run's
	// check before starting CMD ("the command was not started"), or the
	// runner's renew deadline, already past at the acquisition ("… before
	// the command started").
	want := "the command was not started"
	if strings.Contains(r.stderr, "before the command started") {
		want = "before the command started"
	}
	oneErrorLine(t, r, want)
	if _, err := os.Stat(ran); err == nil {
		t.Errorf("the command ran")
	}
	runs := b.runsJSON(t, "--lease", "slow")
	if len(runs) != 1 || runs[0].Status == "succeeded" || runs[0].Status == "running" {
		t.Errorf("the run: %+v", runs)
	}
	if l := b.lease(t, "slow"); l.State == "held" {
		t.Errorf("the lease should have been released: %+v", l)
	}
}
