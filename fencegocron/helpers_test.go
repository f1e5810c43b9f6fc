package fencegocron_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/teststore"
)

// cluster is one database and the stores of the replicas that share it,
// each on its own connection pool, as separate processes would be.
type cluster struct {
	admin *fence.Store // for setup and inspection; never paused
	dsn   string
}

func newCluster(t *testing.T, b teststore.Backend) cluster {
	t.Helper()
	s, dsn := b.OpenDSN(t)
	return cluster{admin: s, dsn: dsn}
}

// replica opens another store on the cluster's tables.
func (c cluster) replica(t *testing.T, opts ...fence.Option) *fence.Store {
	t.Helper()
	s, err := fencedsn.Open(context.Background(), c.dsn, append([]fence.Option{fence.WithPrefix(c.admin.Prefix())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// counter creates a one-row table that runs update with fenced writes:
// n counts accepted writes, last is the fence of the last one.
func (c cluster) counter(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	tbl := c.admin.Prefix() + "gocron_counter"
	db := c.admin.DB()
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+tbl+" (id INT PRIMARY KEY, n INT NOT NULL, last BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + tbl) })
	if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" (id, n, last) VALUES (1, 0, 0)"); err != nil {
		t.Fatal(err)
	}
	return tbl
}

// bump is the fenced write of a run: it counts the run and records its fence.
func bump(ctx context.Context, s *fence.Store, tbl string, tok fence.Token) error {
	_, err := s.Exec(ctx, tok, s.Rebind("UPDATE "+tbl+" SET n = n + 1, last = ? WHERE id = 1 AND {{fence}}"), tok.Fence)
	return err
}

func readCounter(t *testing.T, c cluster, tbl string) (n int, last int64) {
	t.Helper()
	if err := c.admin.DB().QueryRow("SELECT n, last FROM "+tbl+" WHERE id = 1").Scan(&n, &last); err != nil {
		t.Fatal(err)
	}
	return n, last
}

// execution is one run of a job as the job saw it.
type execution struct {
	sched int
	at    time.Time
	fence int64
}

func (e execution) slot() time.Time { return e.at.Truncate(time.Second) }

type journal struct {
	mu   sync.Mutex
	runs []execution
}

func (j *journal) add(e execution) {
	j.mu.Lock()
	j.runs = append(j.runs, e)
	j.mu.Unlock()
}

func (j *journal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.runs)
}

func (j *journal) sorted() []execution {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := append([]execution(nil), j.runs...)
	sort.Slice(out, func(a, b int) bool { return out[a].at.Before(out[b].at) })
	return out
}

// checkOnePerSlot fails t unless every slot ran once and at least min
// slots ran.
func checkOnePerSlot(t *testing.T, runs []execution, min int) {
	t.Helper()
	seen := map[time.Time]execution{}
	for _, r := range runs {
		if prev, ok := seen[r.slot()]; ok {
			t.Errorf("slot %s ran twice: on scheduler %d (fence %d) and on scheduler %d (fence %d)",
				r.slot().Format("15:04:05"), prev.sched, prev.fence, r.sched, r.fence)
		}
		seen[r.slot()] = r
	}
	if len(seen) < min {
		t.Errorf("%d slots ran, want at least %d", len(seen), min)
	}
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

// gate pauses a store as a stop-the-world pause would pause its process:
// while closed, every operation of the store waits at its start, holding
// nothing, until the gate opens. It is an Observer, so the store needs no
// test hooks.
type gate struct {
	mu sync.Mutex
	ch chan struct{} // nil while open
}

func (g *gate) Observe(ctx context.Context, _ fence.Op, _ string) (context.Context, func(fence.Event)) {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch != nil {
		<-ch // deliberately deaf to ctx: a paused process does not see its deadlines
	}
	return ctx, func(fence.Event) {}
}

func (g *gate) close() {
	g.mu.Lock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) open() {
	g.mu.Lock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
	g.mu.Unlock()
}
