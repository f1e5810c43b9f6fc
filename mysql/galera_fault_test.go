package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
)

// galeraScript runs clusters/galera/galera.sh with args, for the cases that
// crash and restart nodes. They run only on a cluster that script started
// (FENCE_GALERA_DIR, the script's own setting, names its data directory).
func galeraScript(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"../clusters/galera/galera.sh"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("galera.sh %v: %v\n%s", args, err, out)
	}
}

// TestGaleraNodeCrash: A holds a lease through node 3, node 3 is
// SIGKILLed, A's client reconnects to node 2 and keeps writing as the
// holder; the lease lapses and B takes it through node 1; A's writes through
// node 2, and through node 3 once it has rejoined, are refused; B's go
// through every node.
func TestGaleraNodeCrash(t *testing.T) {
	c := galeraCluster(t)
	if len(c.dsns) < 3 {
		t.Fatalf("the crash case needs 3 nodes, FENCE_TEST_GALERA has %d", len(c.dsns))
	}
	if os.Getenv("FENCE_GALERA_DIR") == "" {
		if testdb.Required() {
			t.Fatal("FENCE_TEST_GALERA is set but FENCE_GALERA_DIR is not: the crash case kills and restarts nodes of the cluster galera.sh started there")
		}
		t.Skip("SKIP galera crash case: set FENCE_GALERA_DIR to the data directory of the cluster clusters/galera/galera.sh started")
	}
	prefix := testdb.Prefix()
	ctx := ctxG(t)
	s := make([]*fence.Store, 3)
	for i := range s {
		s[i] = openGaleraStore(t, c.dsns[i], prefix)
	}
	if _, err := s[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	target := prefix + "crash"
	t.Cleanup(func() {
		galeraScript(t, "rejoin", "3")
		c.dbs[0].ExecContext(context.Background(), "DROP TABLE IF EXISTS "+target)
		s[0].DropTables(context.Background())
	})
	mustExec(t, c.dbs[0], "CREATE TABLE "+target+" (id INT PRIMARY KEY, fence BIGINT NOT NULL) ENGINE=InnoDB")
	mustExec(t, c.dbs[0], "INSERT INTO "+target+" VALUES (1, 0)")
	const ttl = 3 * time.Second
	a, err := s[2].Acquire(ctx, "crash", ttl)
	if err != nil {
		t.Fatal(err)
	}
	for _, db := range c.dbs[:2] {
		syncRead(t, db, func(c *sql.Conn) error {
			var n int
			return c.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+prefix+"leases").Scan(&n)
		})
	}
	write := func(s *fence.Store, tok fence.Token) error {
		_, err := s.Exec(ctx, tok, "UPDATE "+target+" SET fence = ? WHERE id = 1 AND {{fence}}", tok.Fence)
		return err
	}

	galeraScript(t, "kill", "3")
	if err := write(s[2], a.Token); err == nil {
		t.Fatal("a write through the killed node succeeded")
	}
	// A's client reconnects to node 2 and is still the holder there.
	if err := write(s[1], a.Token); err != nil {
		t.Fatalf("A's write through node 2 while it holds the lease: %v", err)
	}

	var b fence.Lease
	for {
		b, err = s[0].Acquire(ctx, "crash", time.Minute)
		if err == nil {
			break
		}
		if !errors.Is(err, fence.ErrHeld) && !fence.IsRetryable(err) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := write(s[1], a.Token); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("A's write through node 2 after B's takeover: want ErrLost, got %v", err)
	}
	if err := write(s[0], b.Token); err != nil {
		t.Fatalf("B's write through node 1: %v", err)
	}

	galeraScript(t, "rejoin", "3")
	// Node 3 came back by IST or SST: it has B's takeover before it serves.
	var aerr error
	for range 20 {
		// The pool's connections to the killed server fail first.
		if aerr = write(s[2], a.Token); errors.Is(aerr, fence.ErrLost) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !errors.Is(aerr, fence.ErrLost) {
		t.Fatalf("A's write through the rejoined node 3: want ErrLost, got %v", aerr)
	}
	for {
		err := write(s[2], b.Token)
		if err == nil {
			break
		}
		if !fence.IsRetryable(err) {
			t.Fatalf("B's write through the rejoined node 3: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var f int64
	syncRead(t, c.dbs[1], func(c *sql.Conn) error {
		return c.QueryRowContext(ctx, "SELECT fence FROM "+target+" WHERE id = 1").Scan(&f)
	})
	if f != b.Token.Fence {
		t.Fatalf("the protected row carries fence %d, want B's %d", f, b.Token.Fence)
	}
}
