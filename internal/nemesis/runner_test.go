package nemesis

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeCluster is a Links and a Procs that checks, at every cut and kill,
// that the kept node 1 still has a majority.
type fakeCluster struct {
	t           *testing.T
	mu          sync.Mutex
	cuts        [][2]int
	down        map[int]bool
	failRejoins int // the next n rejoins fail
	rejoins     int
	minority    []string
}

func (f *fakeCluster) check(what string) {
	if !KeepsQuorum(3, 1, f.down, f.cuts) {
		f.minority = append(f.minority, what)
	}
}

func (f *fakeCluster) Drop(_ context.Context, a, b int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cuts = append(f.cuts, [2]int{a, b})
	f.check("drop")
	return nil
}

func (f *fakeCluster) Heal(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cuts = nil
	return nil
}

func (f *fakeCluster) Whole(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.down) > 0 || len(f.cuts) > 0 {
		return errors.New("not whole")
	}
	return nil
}

func (f *fakeCluster) Kill(_ context.Context, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[n] = true
	f.check("kill")
	return nil
}

func (f *fakeCluster) Rejoin(_ context.Context, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRejoins > 0 || len(f.cuts) > 0 {
		f.failRejoins--
		return errors.New("rejoin failed")
	}
	f.rejoins++
	delete(f.down, n)
	return nil
}

// A rejoin that keeps failing leaves node 3 down: the runner then skips
// the cuts that would leave node 1 alone with node 2, still plays the
// others, retries the rejoin before and after each step, and the node is
// back before the run ends.
func TestRunnerNodeDownNeverLeavesKeepInMinority(t *testing.T) {
	ms := time.Millisecond
	cutOff2 := [][2]int{{1, 2}, {2, 1}, {2, 3}, {3, 2}}
	iso3 := [][2]int{{3, 1}, {1, 3}, {3, 2}, {2, 3}}
	rec := &Record{Net: Net{Prefix: "fk", Nodes: 3, Subnet: "10.0.0"}, Plan: Plan{Nodes: 3, Keep: 1, Kill: 3},
		Steps: []Step{
			{At: 10 * ms, Kind: Kill, Node: 3, Hold: 10 * ms, Flaps: 1},
			{At: 40 * ms, Kind: Split, Cuts: cutOff2, Hold: 10 * ms, Flaps: 1},                   // skipped: 3 down
			{At: 60 * ms, Kind: Isolate, Cuts: iso3, Hold: 10 * ms, Flaps: 1},                    // played; the rejoin under it fails
			{At: 80 * ms, Kind: Bridge, Cuts: [][2]int{{1, 2}, {2, 1}}, Hold: 10 * ms, Flaps: 1}, // played once 3 is back
		}}
	// The kill step's 3 tries, the retry before step 1 (skipped), the one
	// at its end and the one before step 2 fail; step 2's cut (node 3's
	// own) is played with node 3 down, and the rejoin tried after its heal
	// succeeds.
	f := &fakeCluster{t: t, down: map[int]bool{}, failRejoins: 6}
	r := &Runner{Net: f, Procs: f, Rec: rec, SyncWait: time.Nanosecond} // skip at once, not wait for the rejoin
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(f.minority) > 0 {
		t.Fatalf("node 1 left in a minority at %v; applied %+v", f.minority, rec.Applied)
	}
	var whats []string
	for _, e := range rec.Applied {
		whats = append(whats, e.What)
	}
	j := strings.Join(whats, " | ")
	if !strings.Contains(j, "skipped: would leave node 1 in a minority") {
		t.Errorf("the split with node 3 down was not skipped: %s", j)
	}
	if f.rejoins != 1 || len(f.down) != 0 {
		t.Errorf("node 3 not rejoined once (rejoins %d, down %v): %s", f.rejoins, f.down, j)
	}
	if c := r.Counts(); c[Kill] != 1 || c["rejoin"] != 1 || c["rejoin-failed"] != 6 {
		t.Errorf("counts %v", c)
	}
	// The isolation of node 3 was played with it down; the bridge after
	// the rejoin too (node 3 back, 1 and 2 may be cut).
	cuts := 0
	for _, w := range whats {
		if w == "cut" {
			cuts++
		}
	}
	if cuts != 2 || !slices.Contains(whats, "rejoin") {
		t.Errorf("want 2 cuts and a rejoin: %s", j)
	}
}

// The kill waits until the cluster is whole: a cut still settling (here:
// Whole failing for a while) delays it, and the steps after it are shifted.
func TestRunnerKillWaitsForWholeCluster(t *testing.T) {
	ms := time.Millisecond
	rec := &Record{Net: Net{Prefix: "fk", Nodes: 3, Subnet: "10.0.0"}, Plan: Plan{Nodes: 3, Keep: 1, Kill: 3},
		Steps: []Step{{At: 0, Kind: Kill, Node: 3, Hold: 5 * ms, Flaps: 1}}}
	w := &wholeAfter{fakeCluster: fakeCluster{t: t, down: map[int]bool{}}, n: 3}
	r := &Runner{Net: w, Procs: w, Rec: rec}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w.asked < 4 {
		t.Fatalf("killed after %d checks, want after the 4th", w.asked)
	}
	if c := r.Counts(); c[Kill] != 1 || c["rejoin"] != 1 {
		t.Fatalf("counts %v, applied %+v", c, rec.Applied)
	}
}

type wholeAfter struct {
	fakeCluster
	n, asked int
}

func (w *wholeAfter) Whole(ctx context.Context) error {
	w.asked++
	if w.asked <= w.n {
		return errors.New("node 2 still rejoining")
	}
	return w.fakeCluster.Whole(ctx)
}

// probed is a fakeCluster whose nodes can die or fall out of sync on their
// own (a Galera joiner aborting when its donor is cut away; a node still
// rejoining after a heal), seen through Members.
type probed struct {
	fakeCluster
	unsynced map[int]bool
	joining  int // Members calls that still see a rejoined node unsynced
	heals    int
	onHeal   func(p *probed) // after each heal, under mu
}

// Rejoin brings the node back alive but still joining for the next
// 2 looks.
func (p *probed) Rejoin(ctx context.Context, n int) error {
	if err := p.fakeCluster.Rejoin(ctx, n); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unsynced[n], p.joining = true, 2
	return nil
}

func (p *probed) Heal(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts = nil
	p.heals++
	if p.onHeal != nil {
		p.onHeal(p)
	}
	return nil
}

func (p *probed) Members(ctx context.Context) (alive, synced []int, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err // as the members command, killed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.joining > 0 {
		if p.joining--; p.joining == 0 {
			clear(p.unsynced)
		}
	}
	for n := 1; n <= 3; n++ {
		if !p.down[n] {
			alive = append(alive, n)
			if !p.unsynced[n] {
				synced = append(synced, n)
			}
		}
	}
	return alive, synced, nil
}

func (p *probed) Drop(ctx context.Context, a, b int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts = append(p.cuts, [2]int{a, b})
	out := map[int]bool{}
	for n := range p.down {
		out[n] = true
	}
	for n := range p.unsynced {
		out[n] = true
	}
	if !KeepsQuorum(3, 1, out, p.cuts) {
		p.minority = append(p.minority, "drop")
	}
	return nil
}

// Issue 31's long run: node 2, rejoining after a cut, aborted when its
// donor (node 3) was cut away, and the nemesis went on isolating node 3,
// each time leaving node 1 alone. With a Prober the runner finds node 2
// dead and restarts it, and cuts node 3 off neither while node 2 is down
// nor while it is alive but not yet synced: with a short SyncWait it skips
// those cuts, with a longer one it waits for node 2 and then cuts, the
// hold as drawn.
func TestRunnerRevivesNodeThatDiedAndSparesKeep(t *testing.T) {
	for _, wait := range []time.Duration{time.Nanosecond, 5 * time.Second} {
		t.Run(wait.String(), func(t *testing.T) { reviveCase(t, wait) })
	}
}

func reviveCase(t *testing.T, syncWait time.Duration) {
	ms := time.Millisecond
	iso := func(v int) [][2]int {
		var c [][2]int
		for o := 1; o <= 3; o++ {
			if o != v {
				c = append(c, [2]int{v, o}, [2]int{o, v})
			}
		}
		return c
	}
	rec := &Record{Net: Net{Prefix: "fk", Nodes: 3, Subnet: "10.0.0"}, Plan: Plan{Nodes: 3, Keep: 1},
		Steps: []Step{
			{At: 0, Kind: Isolate, Cuts: iso(2), Hold: 50 * ms, Flaps: 1},
			{At: 100 * ms, Kind: Isolate, Cuts: iso(3), Hold: 50 * ms, Flaps: 1}, // node 2 dead, its rejoin fails
			{At: 200 * ms, Kind: Isolate, Cuts: iso(3), Hold: 50 * ms, Flaps: 1}, // node 2 rejoined but not synced
			{At: 300 * ms, Kind: Isolate, Cuts: iso(3), Hold: 50 * ms, Flaps: 1}, // node 2 synced
		}}
	p := &probed{fakeCluster: fakeCluster{t: t, down: map[int]bool{}, failRejoins: 1}, unsynced: map[int]bool{}}
	p.onHeal = func(p *probed) {
		if p.heals == 1 { // node 2 aborts after the first cut
			p.down[2] = true
		}
	}
	r := &Runner{Net: p, Procs: p, Rec: rec, SyncWait: syncWait}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var whats []string
	var cutAt time.Duration
	for _, e := range rec.Applied {
		whats = append(whats, e.What)
		switch e.What {
		case "cut":
			cutAt = e.T
		case "heal":
			if d := e.T - cutAt; d < 50*ms {
				t.Errorf("a cut held %s, drawn 50ms", d)
			}
		}
	}
	j := strings.Join(whats, " | ")
	if len(p.minority) > 0 {
		t.Fatalf("node 1 left in a minority: %s", j)
	}
	if !strings.Contains(j, "node 2 found dead") || r.Counts()["rejoin"] != 1 {
		t.Errorf("node 2 not found dead and rejoined once (counts %v): %s", r.Counts(), j)
	}
	wantSkips, wantCuts := 2, 2
	if syncWait > time.Second {
		wantSkips, wantCuts = 0, 4
	}
	if n := strings.Count(j, "skipped: would leave node 1 in a minority"); n != wantSkips {
		t.Errorf("%d cuts of node 3 skipped, want %d: %s", n, wantSkips, j)
	}
	if n := strings.Count(j, "cut"); n != wantCuts {
		t.Errorf("%d cuts played, want %d: %s", n, wantCuts, j)
	}
	if len(p.down) != 0 {
		t.Errorf("node 2 still down at the end: %s", j)
	}
}

// The run ending while the guard waits for a node to resync is not a
// failure to cut (the isolate run of the hour ended with exit 2 so: "ip
// … route replace …: context canceled").
func TestRunnerEndDuringGuardIsNoError(t *testing.T) {
	rec := &Record{Net: Net{Prefix: "fk", Nodes: 3, Subnet: "10.0.0"}, Plan: Plan{Nodes: 3, Keep: 1},
		Steps: []Step{{At: 0, Kind: Isolate, Cuts: [][2]int{{1, 3}, {3, 1}, {2, 3}, {3, 2}}, Hold: time.Second, Flaps: 1}}}
	p := &probed{fakeCluster: fakeCluster{t: t, down: map[int]bool{}}, unsynced: map[int]bool{2: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r := &Runner{Net: p, Procs: p, Rec: rec, SyncWait: time.Minute}
	if err := r.Run(ctx); err != nil {
		t.Fatalf("run ended during the guard's wait: %v", err)
	}
	for _, e := range rec.Applied {
		if e.What == "cut" {
			t.Fatalf("cut after the run ended: %+v", rec.Applied)
		}
	}
}
