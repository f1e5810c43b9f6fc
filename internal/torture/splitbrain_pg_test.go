package torture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/nemesis"
	"github.com/fencekit/fence/internal/testdb"
)

// The PostgreSQL split brain (issue 31): a primary and a streaming standby,
// each in a network namespace of its own; the two are cut apart both ways
// while clients (the root namespace) still reach both; the standby is
// promoted (what a manager does when it cannot see the primary). The old
// primary is not killed: it keeps serving its clients. Then clients of each
// side acquire one lease again and again and write to an external resource
// that, like fence-torture's external checker, accepts a write when its
// fence is not below the highest it has seen.
//
// Asynchronous replication: the old primary acknowledges its clients'
// acquisitions, and its fences (the database clock in µs, ADR 0004)
// interleave with the new primary's: the resource accepts both owners,
// alternately, for as long as the split lasts. The test requires that it
// shows this (it is what docs/CLUSTERS.md states), so that a change that
// hides the split brain is noticed.
//
// Synchronous replication (synchronous_standby_names = '*',
// synchronous_commit = on): the old primary's commits wait for a standby it
// no longer has, so no acquisition or write there is ever reported done:
// every call ends in an error (ambiguous, by its deadline) and the resource
// accepts only the new primary's owners. This is the configuration fence is
// safe in.
func TestPostgresSplitBrain(t *testing.T) {
	testdb.Long(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root (ip netns, runuser)")
	}
	pgbin := os.Getenv("PGBIN")
	if pgbin == "" {
		pgbin = "/usr/lib/postgresql/15/bin"
	}
	if _, err := os.Stat(filepath.Join(pgbin, "initdb")); err != nil {
		t.Skipf("no PostgreSQL server binaries in %s (set PGBIN)", pgbin)
	}
	for i, mode := range []string{"async", "sync"} {
		t.Run(mode, func(t *testing.T) {
			n := nemesis.Net{Prefix: fmt.Sprintf("fpg%d", (os.Getpid()*2+i)%10000), Nodes: 2, Subnet: fmt.Sprintf("10.78.%d", i)}
			r := splitBrain(t, pgbin, n, mode == "sync")
			t.Logf("%s: old primary: %d acquisitions acknowledged, %d calls failed (%d ambiguous); new primary: %d acknowledged; resource accepted %d writes from the old primary's owners, %d from the new's, owner changes %d (%d back to the old side)",
				mode, r.oldOK, r.oldFail, r.oldAmb, r.newOK, r.accOld, r.accNew, r.switches, r.backToOld)
			if mode == "sync" {
				if r.oldOK != 0 || r.accOld != 0 {
					t.Fatalf("synchronous mode: the cut-off old primary acknowledged %d acquisitions and the resource accepted %d of its owners' writes", r.oldOK, r.accOld)
				}
				if r.newOK == 0 {
					t.Fatal("synchronous mode: the new primary acknowledged nothing: the test shows nothing")
				}
				return
			}
			if r.oldOK == 0 || r.newOK == 0 || r.backToOld == 0 {
				t.Fatalf("asynchronous mode: expected the split brain (both primaries acknowledging acquisitions, the resource going back to an old-primary owner after a new one); got %+v", r)
			}
		})
	}
}

type splitResult struct {
	oldOK, oldFail, oldAmb, newOK int
	accOld, accNew                int
	switches, backToOld           int
}

func splitBrain(t *testing.T, pgbin string, n nemesis.Net, sync bool) splitResult {
	ctx := context.Background()
	if err := n.Up(ctx); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "fence-pgsplit-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var started []string
	t.Cleanup(func() {
		for _, d := range started {
			_ = exec.Command("runuser", "-u", "postgres", "--", filepath.Join(pgbin, "pg_ctl"), "-D", d, "-m", "immediate", "-w", "stop").Run()
		}
		if err := n.Down(context.Background()); err != nil {
			t.Error(err)
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("kept %s", dir)
		}
	})
	run := func(ns string, args ...string) {
		t.Helper()
		full := append([]string{"netns", "exec", ns, "runuser", "-u", "postgres", "--"}, args...)
		out, err := exec.Command("ip", full...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	p1, p2 := filepath.Join(dir, "p1"), filepath.Join(dir, "p2")
	// Sockets outside the data directories: pg_basebackup would copy the
	// primary's socket lock file into the standby's.
	s1, s2 := filepath.Join(dir, "s1"), filepath.Join(dir, "s2")
	for _, d := range []string{p1, s1, s2} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("chown", "postgres", p1, s1, s2, dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	run(n.NS(1), filepath.Join(pgbin, "initdb"), "-D", p1, "-U", "postgres", "--auth=trust", "-N")
	ssn := "''"
	if sync {
		ssn = "'*'"
	}
	conf := fmt.Sprintf("\nlisten_addresses = '%s'\nport = 5432\nunix_socket_directories = '%s'\nwal_level = replica\nmax_wal_senders = 4\nfsync = off\nsynchronous_standby_names = %s\nsynchronous_commit = on\n", n.Addr(1), s1, ssn)
	appendFile(t, filepath.Join(p1, "postgresql.conf"), conf)
	appendFile(t, filepath.Join(p1, "pg_hba.conf"), fmt.Sprintf("\nhost all all %s.0/24 trust\nhost replication all %s.0/24 trust\n", n.Subnet, n.Subnet))
	run(n.NS(1), filepath.Join(pgbin, "pg_ctl"), "-D", p1, "-l", p1+".log", "-w", "-t", "120", "start")
	started = append(started, p1)
	run(n.NS(2), filepath.Join(pgbin, "pg_basebackup"), "-h", n.Addr(1), "-U", "postgres", "-D", p2, "-R", "-X", "stream")
	appendFile(t, filepath.Join(p2, "postgresql.conf"), fmt.Sprintf("\nlisten_addresses = '%s'\nunix_socket_directories = '%s'\n", n.Addr(2), s2))
	run(n.NS(2), filepath.Join(pgbin, "pg_ctl"), "-D", p2, "-l", p2+".log", "-w", "-t", "120", "start")
	started = append(started, p2)

	dsn := func(i int) string {
		return fmt.Sprintf("postgres://postgres@%s:5432/postgres?sslmode=disable&connect_timeout=2", n.Addr(i))
	}
	oldSt := openSplitStore(t, dsn(1))
	if _, err := oldSt.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// The standby streams (and, in sync mode, is the synchronous one) and
	// has the schema.
	waitFor(t, "the standby streaming", func() bool {
		var ok bool
		q := "SELECT count(*) > 0 FROM pg_stat_replication WHERE state = 'streaming' AND replay_lsn = pg_current_wal_lsn()"
		return oldSt.DB().QueryRowContext(ctx, q).Scan(&ok) == nil && ok
	})

	// The split: cut both ways, then promote the standby, which a manager
	// does when it cannot see the primary. The new primary has no standby
	// either: the failover script clears synchronous_standby_names there
	// (else its commits wait for one).
	if err := n.Drop(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := n.Drop(ctx, 2, 1); err != nil {
		t.Fatal(err)
	}
	run(n.NS(2), filepath.Join(pgbin, "pg_ctl"), "-D", p2, "-w", "promote")
	newSt := openSplitStore(t, dsn(2))
	if sync {
		for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = ''", "SELECT pg_reload_conf()"} {
			if _, err := newSt.DB().ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Clients of both sides, one lease, 300 ms TTL, for 8 s: each acquires
	// when it can and writes to the resource with its fence.
	var r splitResult
	var maxFence int64
	last := ""
	accept := func(side string, f int64) {
		if f < maxFence {
			return
		}
		maxFence = f
		if side == "old" {
			r.accOld++
		} else {
			r.accNew++
		}
		if last != "" && last != side {
			r.switches++
			if side == "old" {
				r.backToOld++
			}
		}
		last = side
	}
	end := time.Now().Add(8 * time.Second)
	for i := 0; time.Now().Before(end) && i < 1000; i++ {
		for _, side := range []string{"old", "new"} {
			st := newSt
			if side == "old" {
				st = oldSt
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			l, err := st.Acquire(cctx, "split", 300*time.Millisecond)
			cancel()
			switch {
			case err == nil:
				if side == "old" {
					r.oldOK++
				} else {
					r.newOK++
				}
				accept(side, l.Token.Fence)
			case side == "old" && !errors.Is(err, fence.ErrHeld):
				r.oldFail++
				if errors.Is(err, fence.ErrAmbiguous) {
					r.oldAmb++
				}
			}
		}
		time.Sleep(150 * time.Millisecond) // let the lease lapse on both sides now and then
	}
	return r
}

func openSplitStore(t *testing.T, dsn string) *fence.Store {
	t.Helper()
	var st *fence.Store
	waitFor(t, "a store on "+dsn, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := fencedsn.Open(ctx, dsn)
		if err != nil {
			return false
		}
		st = s
		return true
	})
	t.Cleanup(func() { st.Close() })
	return st
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
