package sqloracle_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/sqloracle"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/internal/teststore"
)

// The oracle's budget and seed come from the environment, so that one
// command runs it for CI's fixed budget and another for an hour:
//
//	FENCE_LONG=1 go test -run TestOracle ./internal/sqloracle          (CI: 3000 statements per database)
//	FENCE_LONG=1 FENCE_ORACLE_DURATION=1h go test -run TestOracle -timeout 0 -v ./internal/sqloracle
//
// FENCE_ORACLE_COUNT sets the statements per database (default 3000, or no
// bound when FENCE_ORACLE_DURATION is set), FENCE_ORACLE_DURATION the time
// per database, FENCE_ORACLE_SEED the seed (default: the time, printed),
// FENCE_ORACLE_ONLY one statement index to reproduce a failure.
type budget struct {
	count int
	dur   time.Duration
	seed  uint64
	only  int64
}

func budgetFromEnv(t *testing.T) budget {
	b := budget{count: 3000, seed: uint64(time.Now().UnixNano()), only: -1}
	if v := os.Getenv("FENCE_ORACLE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FENCE_ORACLE_DURATION: %v", err)
		}
		b.dur, b.count = d, 0
	}
	if v := os.Getenv("FENCE_ORACLE_COUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("FENCE_ORACLE_COUNT: %v", err)
		}
		b.count = n
	}
	if v := os.Getenv("FENCE_ORACLE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FENCE_ORACLE_SEED: %v", err)
		}
		b.seed = n
	}
	if v := os.Getenv("FENCE_ORACLE_ONLY"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("FENCE_ORACLE_ONLY: %v", err)
		}
		b.only = n
	}
	return b
}

// oracleStores opens the handles the oracle runs on for backend b, over one
// fresh table prefix: the default one, and the most permissive one fence
// accepts (PostgreSQL's simple protocol, which sends a whole text and runs
// every statement in it; MySQL's interpolateParams with multiStatements).
func oracleStores(t *testing.T, b teststore.Backend) []*fence.Store {
	s, dsn := b.OpenDSN(t)
	stores := []*fence.Store{s}
	extra := ""
	switch b.Name {
	case "postgres":
		extra = "default_query_exec_mode=simple_protocol"
	case "mysql":
		extra = "interpolateParams=true&multiStatements=true"
	}
	if extra != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		s2, err := fencedsn.Open(context.Background(), dsn+sep+extra, fence.WithPrefix(s.Prefix()))
		if err != nil {
			t.Fatalf("open with %s: %v", extra, err)
		}
		t.Cleanup(func() { s2.Close() })
		stores = append(stores, s2)
	}
	return stores
}

// TestOracle generates statements of every shape fence accepts, spelled the
// hostile ways, and runs each accepted one on the real server as a stale
// owner (it must change nothing) and as the holder (to count real writes).
func TestOracle(t *testing.T) {
	testdb.Long(t)
	bud := budgetFromEnv(t)
	t.Logf("seed %d (FENCE_ORACLE_SEED=%d reproduces this run)", bud.seed, bud.seed)
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		ctx := context.Background()
		stores := oracleStores(t, b)
		o, err := sqloracle.Setup(ctx, stores, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(context.Background())
		opt := sqloracle.RunOptions{Seed: bud.seed, Count: bud.count, Only: bud.only, MaxMinimise: 30, MinimiseBudget: 300,
			Progress: func(s *sqloracle.Stats) {
				if bud.dur > 0 {
					t.Logf("%s: %d statements, %d accepted, %d failures, %s", s.Dialect, s.Generated, s.Accepted, s.Failures, s.Elapsed.Round(time.Second))
				}
			}}
		if bud.dur > 0 {
			opt.Until = time.Now().Add(bud.dur)
		}
		if trace := os.Getenv("FENCE_ORACLE_TRACE"); trace != "" {
			// server: the statements the server refused for the holder;
			// all: every statement.
			opt.Trace = func(st *sqloracle.Stmt, r sqloracle.Outcome) {
				if trace == "all" || trace == "server" && r.Refused == nil && r.Holder.Err != nil && !errors.Is(r.Holder.Err, fence.ErrNoMatch) {
					t.Logf("%d %s: %s\n    refused=%v holder=%v", st.Index, st.Session, sqloracle.Quote(r.SQL), r.Refused, r.Holder.Err)
				}
			}
		}
		st, fails := o.Run(ctx, opt)
		t.Log("\n" + st.Report())
		for _, f := range fails {
			t.Error(f.String())
		}
		if bud.only < 0 && st.Accepted > 0 && st.HolderWrote*4 < st.Accepted {
			t.Errorf("only %d of %d accepted statements wrote as the holder: the generator makes too few real writes to prove anything", st.HolderWrote, st.Accepted)
		}
	})
}

// TestOracleSmoke is the oracle on SQLite for a few statements, in the
// default test run: the generator, the setup and the checks work.
func TestOracleSmoke(t *testing.T) {
	ctx := context.Background()
	stores := oracleStores(t, teststore.SQLite)
	o, err := sqloracle.Setup(ctx, stores, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close(context.Background())
	st, _ := o.Run(ctx, sqloracle.RunOptions{Seed: 1, Count: 150, Only: -1})
	t.Log("\n" + st.Report())
	if st.Accepted == 0 || st.Refused == 0 || st.HolderWrote == 0 {
		t.Fatalf("a smoke run should have accepted, refused and written statements: %+v", st)
	}
}

// The control: a statement the checker accepts and that does not fence (a
// plain write without the guard is impossible through Exec, so the check
// is shown on the oracle's own attempt: the holder's write changes rows,
// and a snapshot compare sees it).
func TestOracleSeesWrites(t *testing.T) {
	ctx := context.Background()
	stores := oracleStores(t, teststore.SQLite)
	o, err := sqloracle.Setup(ctx, stores, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close(context.Background())
	st := &sqloracle.Stmt{Pieces: []sqloracle.Piece{{Text: "UPDATE " + o.Schema.Items + " SET val = 'w' WHERE {{fence}}", Plain: "UPDATE " + o.Schema.Items + " SET val = 'w' WHERE {{fence}}"}}}
	r := o.Check(ctx, st)
	if r.Refused != nil || !r.Holder.Changed || r.Stale.Changed || !errors.Is(r.Stale.Err, fence.ErrLost) || r.Failed() {
		t.Fatalf("outcome: refused=%v holder=%+v stale=%+v", r.Refused, r.Holder, r.Stale)
	}
	if !strings.Contains(r.Holder.Diff, "val v1 -> w") {
		t.Fatalf("holder's diff: %s", r.Holder.Diff)
	}
}
