package postgres_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/internal/teststore"
)

// TestRestoreWithPgDump is the rollback case of the conformance suite with
// the tools an operator uses: pg_dump -t of the lease table, and psql
// replaying the dump (--clean: the table is dropped and recreated, as in a
// real restore). After the restore the next fence is above every fence
// handed out before it, ExecResource refuses the older owner, and
// RaiseFences revokes the holder the dump brought back.
func TestRestoreWithPgDump(t *testing.T) {
	tools := map[string]string{}
	for _, tool := range []string{"pg_dump", "psql"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			if testdb.Required() {
				t.Fatalf("%s is required (FENCE_REQUIRE_DBS=1) but not on PATH: %v; apt-get install postgresql-client", tool, err)
			}
			t.Skipf("%s not on PATH (%v): the restore is covered by fencetest's Rollback cases; apt-get install postgresql-client to run it with the real tools", tool, err)
		}
		tools[tool] = p
	}
	s, dsn := teststore.Postgres.OpenDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leases, items := s.Prefix()+"leases", s.Prefix()+"rb_items"
	mustExec(t, s, "CREATE TABLE "+items+" (id INT PRIMARY KEY, val TEXT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
	t.Cleanup(func() { s.DB().Exec("DROP TABLE IF EXISTS " + items) })
	mustExec(t, s, "INSERT INTO "+items+" (id, val) VALUES (1, 'init')")
	write := func(tok fence.Token, val string) error {
		_, err := fence.ExecResource(ctx, s.DB(), fence.Postgres, tok,
			"UPDATE "+items+" SET val = $1, fence_token = {{fence_token}} WHERE id = 1 AND fence_token <= {{fence_token}}", val)
		return err
	}
	run := func(name string, args ...string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, tools[name], args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}

	// The dump: A holds the lease (its row says held for a minute).
	a, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(t.TempDir(), "leases.sql")
	run("pg_dump", "--clean", "--if-exists", "--no-owner", "-t", leases, "-f", dump, dsn)
	if b, err := os.ReadFile(dump); err != nil || len(b) == 0 {
		t.Fatalf("dump %s: %v", dump, err)
	}

	// After the dump: A is revoked, B acquires and writes downstream.
	r, err := s.Revoke(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(b.Token, "B"); err != nil {
		t.Fatal(err)
	}

	// The restore brings A's row back.
	run("psql", "-v", "ON_ERROR_STOP=1", "-q", "-f", dump, dsn)
	if info, err := s.Get(ctx, "job"); err != nil || info.Fence != a.Token.Fence || info.Owner != a.Token.Owner || info.State != fence.StateHeld {
		t.Fatalf("after the restore the dump's row should be back: %+v %v", info, err)
	}

	// The runbook's step: raise and revoke.
	raised, err := s.RaiseFences(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if raised.Floor <= b.Token.Fence || len(raised.Leases) != 1 || raised.Leases[0].Fence != a.Token.Fence {
		t.Fatalf("raise: %+v; want job raised from A's %d above B's %d (revoke %d)", raised, a.Token.Fence, b.Token.Fence, r)
	}
	if _, err := s.Renew(ctx, a.Token, time.Minute); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("A's renew after the raise: %v; want ErrLost", err)
	}
	c, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c.Token.Fence <= raised.Floor {
		t.Fatalf("acquisition after the raise: fence %d, not above %d", c.Token.Fence, raised.Floor)
	}
	if err := write(c.Token, "C"); err != nil {
		t.Fatal(err)
	}
	for _, old := range []fence.Token{a.Token, b.Token} {
		if err := write(old, "stale"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("resource write with fence %d after C's %d: %v; want ErrStale", old.Fence, c.Token.Fence, err)
		}
	}

	// Without the raise: dump a released row, hand a fence out, restore,
	// acquire. The floor alone keeps the next fence above the lost one.
	if err := s.Release(ctx, c.Token); err != nil {
		t.Fatal(err)
	}
	run("pg_dump", "--clean", "--if-exists", "--no-owner", "-t", leases, "-f", dump, dsn)
	d, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(d.Token, "D"); err != nil {
		t.Fatal(err)
	}
	run("psql", "-v", "ON_ERROR_STOP=1", "-q", "-f", dump, dsn)
	e, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if e.Token.Fence <= d.Token.Fence {
		t.Fatalf("first acquisition after the restore: fence %d, not above the lost %d", e.Token.Fence, d.Token.Fence)
	}
	if err := write(e.Token, "E"); err != nil {
		t.Fatal(err)
	}
	if err := write(d.Token, "stale D"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the lost owner's resource write: %v; want ErrStale", err)
	}
}

func mustExec(t *testing.T, s *fence.Store, q string) {
	t.Helper()
	if _, err := s.DB().Exec(q); err != nil {
		t.Fatal(err)
	}
}
