package sqloracle_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
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

// TestSQLiteBoundaries is the differential check of statement boundaries on
// SQLite: for random runs of the fragments that lexers delimit differently
// after a fenced UPDATE, whenever fence accepts the text, SQLite's own
// tokenizer (sqlite3_complete / sqlite3_incomplete of the linked library)
// must find one statement in what fence sends, and the text must hold no
// NUL (SQLite, handed a C string, stops reading there). Lexical only: it
// needs no server and runs in the default test run.
func TestSQLiteBoundaries(t *testing.T) {
	n := 20000
	if testdb.LongEnabled() {
		n = 200000
	}
	s := teststore.SQLite.Open(t)
	l, err := s.Acquire(context.Background(), "b", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sc := &sqloracle.Schema{Dialect: fence.SQLite, Items: "items", Sink: "sink"}
	disagrees := func(q string, args []any) bool {
		fq, _, err := s.Fenced(l.Token, q, args...)
		return err == nil && (sqloracle.SQLiteStatements(fq) > 1 || strings.IndexByte(fq, 0) >= 0)
	}
	seed := budgetFromEnv(t).seed
	accepted := 0
	type catch struct {
		q     string
		i     uint64
		count int
	}
	found := map[string]*catch{}
	for i := range uint64(n) {
		st := sc.Soup(seed, i)
		q, args := st.SQL()
		if _, _, err := s.Fenced(l.Token, q, args...); err == nil {
			accepted++
		}
		if !disagrees(q, args) {
			continue
		}
		fq, _, _ := s.Fenced(l.Token, q, args...)
		kind := "SQLite stops reading at a NUL byte that fence reads past"
		if strings.IndexByte(fq, 0) < 0 {
			kind = fmt.Sprintf("SQLite's tokenizer finds %d statements", sqloracle.SQLiteStatements(fq))
		}
		if c := found[kind]; c != nil {
			c.count++
			continue
		}
		mq, _, _, _ := st.Minimise(disagrees, 300)
		found[kind] = &catch{q: mq, i: i, count: 1}
	}
	for kind, c := range found {
		t.Errorf("fence accepts a text that SQLite does not read as one statement (%s), %d soups like it; the first, minimised: seed %d soup %d: %s",
			kind, c.count, seed, c.i, sqloracle.Quote(c.q))
	}
	t.Logf("seed %d: %d soups, %d accepted by fence, %d kinds of disagreement", seed, n, accepted, len(found))
	if accepted == 0 {
		t.Error("fence accepted no soup: the check proves nothing")
	}
}

// TestSQLiteStatements checks the statement count against texts whose
// answer is known.
func TestSQLiteStatements(t *testing.T) {
	for q, want := range map[string]int{
		"x": 1, "x;": 1, "x; -- done": 1, "x; /* a */": 1, "x;;": 1, "x; y": 2, "x; y;": 2,
		"x -- a;\n": 1, "x '; y'": 1, "x [;] y": 1, "x /* ; */ y": 1, "x \x00; y": 1, "": 0, " -- c": 0,
	} {
		if got := sqloracle.SQLiteStatements(q); got != want {
			t.Errorf("SQLiteStatements(%q) = %d, want %d", q, got, want)
		}
	}
	kws := sqloracle.SQLiteKeywords()
	if len(kws) < 100 || !slices.Contains(kws, "SELECT") || !slices.Contains(kws, "RETURNING") {
		t.Fatalf("SQLite keyword list: %d words: %v", len(kws), kws)
	}
}

// TestBoundaries runs the boundary check's soups (a fenced UPDATE followed
// by fragments lexers delimit differently, Schema.Soup) through the oracle
// on every database, on both handles: whatever fence accepts, a stale owner
// writes nothing, and on PostgreSQL's simple protocol and MySQL's
// multiStatements a second statement hidden from fence would really run.
func TestBoundaries(t *testing.T) {
	testdb.Long(t)
	bud := budgetFromEnv(t)
	t.Logf("seed %d", bud.seed)
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		ctx := context.Background()
		o, err := sqloracle.Setup(ctx, oracleStores(t, b), t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(context.Background())
		count := 2000
		if bud.dur > 0 || bud.count != 3000 {
			count = bud.count
		}
		opt := sqloracle.RunOptions{Seed: bud.seed, Count: count, Only: bud.only, Soup: true, MaxMinimise: 10, MinimiseBudget: 300}
		if bud.dur > 0 {
			opt.Until = time.Now().Add(bud.dur)
		}
		st, fails := o.Run(ctx, opt)
		t.Log("\n" + st.Report())
		for _, f := range fails {
			t.Error(f.String())
		}
		if st.Accepted == 0 {
			t.Error("fence accepted no soup: the check proves nothing")
		}
	})
}
