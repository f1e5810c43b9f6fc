package nemesis

import (
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func plan() Plan {
	return Plan{Nodes: 3, Kinds: Kinds, Duration: 2 * time.Minute, TTL: 2 * time.Second, FailoverTimeout: 5 * time.Second, Keep: 1}
}

// The same seed draws the same schedule; every kind comes up; the kept node
// is never cut off from the majority, nor the dropping side of a one-way cut.
func TestGenerateSeededAndKeepsNode(t *testing.T) {
	p := plan()
	a, err := Generate(rand.New(rand.NewPCG(7, 9)), p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(rand.New(rand.NewPCG(7, 9)), p)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("one seed, two schedules")
	}
	c, _ := Generate(rand.New(rand.NewPCG(8, 9)), p)
	if reflect.DeepEqual(a, c) {
		t.Fatal("two seeds, one schedule")
	}
	seen := map[string]bool{}
	var prevEnd time.Duration
	for _, s := range a {
		seen[s.Kind] = true
		if s.At < prevEnd {
			t.Fatalf("step %s starts before the previous one healed (%s)", s, prevEnd)
		}
		prevEnd = s.end()
		if s.At >= p.Duration {
			t.Fatalf("step %s starts after the plan's end", s)
		}
		if len(s.Cuts) == 0 {
			t.Fatalf("step %s cuts nothing", s)
		}
		switch s.Kind {
		case OneWay:
			if s.Cuts[0][0] == p.Keep {
				t.Fatalf("one-way cut drops the kept node's packets: %s", s)
			}
		case Split, Isolate, FlapShort, FlapLong:
			// The kept node stays in the majority: cut from at most a
			// minority of the others.
			cutFrom := map[int]bool{}
			for _, c := range s.Cuts {
				if c[0] == p.Keep {
					cutFrom[c[1]] = true
				}
			}
			if len(cutFrom) > (p.Nodes-1)/2 {
				t.Fatalf("kept node %d in the minority: %s", p.Keep, s)
			}
		}
		if s.Kind == FlapShort {
			if s.Hold >= p.TTL || s.Flaps < 2 {
				t.Fatalf("short flap not shorter than the TTL: %s", s)
			}
		}
		if s.Kind == FlapLong && (s.Hold <= p.TTL || s.Hold <= p.FailoverTimeout) {
			t.Fatalf("long flap not longer than the TTL and the failover timeout: %s", s)
		}
	}
	for _, k := range Kinds {
		if !seen[k] {
			t.Errorf("kind %s never drawn in %d steps", k, len(a))
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	steps, err := Generate(rand.New(rand.NewPCG(1, 2)), plan())
	if err != nil {
		t.Fatal(err)
	}
	r := &Record{Seed: 1, Net: Net{Prefix: "fnx", Nodes: 3, Subnet: "10.77.0"}, Plan: plan(), Steps: steps,
		Applied: []Event{{T: time.Second, What: "cut"}}}
	path := filepath.Join(t.TempDir(), "nemesis.json")
	if err := r.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Steps, r.Steps) || got.Seed != 1 || got.Net != r.Net {
		t.Fatal("the schedule read back differs from the one written")
	}
	if got.Applied != nil {
		t.Fatal("a loaded schedule must start with nothing applied")
	}
}

func TestParseKindsAndValidate(t *testing.T) {
	if _, err := ParseKinds("split,nope"); err == nil {
		t.Fatal("unknown kind accepted")
	}
	if ks, err := ParseKinds("all"); err != nil || len(ks) != len(Kinds) {
		t.Fatalf("all: %v %v", ks, err)
	}
	for _, n := range []Net{{Prefix: "x;rm", Nodes: 3, Subnet: "10.0.0"}, {Prefix: "ok", Nodes: 1, Subnet: "10.0.0"}, {Prefix: "ok", Nodes: 3, Subnet: "10.0.0.1"}} {
		if n.Validate() == nil {
			t.Errorf("%+v accepted", n)
		}
	}
}

func TestKeepsQuorum(t *testing.T) {
	for _, c := range []struct {
		name string
		down map[int]bool
		cuts [][2]int
		want bool
	}{
		{"whole", nil, nil, true},
		{"node 2 cut off", nil, [][2]int{{1, 2}, {2, 1}, {2, 3}, {3, 2}}, true},
		{"node 3 down", map[int]bool{3: true}, nil, true},
		{"node 3 down, node 2 cut off (issue 31)", map[int]bool{3: true}, [][2]int{{1, 2}, {2, 1}}, false},
		{"node 3 down, one-way 2->1", map[int]bool{3: true}, [][2]int{{2, 1}}, false},
		{"node 3 down, node 3 isolated", map[int]bool{3: true}, [][2]int{{3, 1}, {1, 3}, {3, 2}, {2, 3}}, true},
		{"bridge 2-3", nil, [][2]int{{2, 3}, {3, 2}}, true},
		{"node 1 isolated", nil, [][2]int{{1, 2}, {2, 1}, {1, 3}, {3, 1}}, false},
		{"node 1 down", map[int]bool{1: true}, nil, false},
	} {
		if got := KeepsQuorum(3, 1, c.down, c.cuts); got != c.want {
			t.Errorf("%s: KeepsQuorum = %v, want %v", c.name, got, c.want)
		}
	}
}

// With a node killed in the schedule (Plan.Kill, clusters/partitions.sh's
// node 3), no cut is held from the kill until the node has rejoined, and at
// every moment of the schedule the kept node is in a majority, over many
// seeds and every fault set: the combination of the nemesis and the node
// kill that left node 1 alone in issue 31 cannot be drawn.
func TestGenerateKillNeverLeavesKeepInMinority(t *testing.T) {
	sets := [][]string{{Split}, {Isolate}, {Bridge}, {OneWay}, {FlapShort}, {FlapLong}, Kinds}
	for seed := uint64(1); seed <= 300; seed++ {
		for _, ks := range sets {
			p := Plan{Nodes: 3, Kinds: ks, Duration: 7 * time.Minute, TTL: 150 * time.Millisecond, FailoverTimeout: 3 * time.Second, Keep: 1, Kill: 3}
			steps, err := Generate(rand.New(rand.NewPCG(seed, 3<<32)), p)
			if err != nil {
				t.Fatal(err)
			}
			kills := 0
			var prevEnd time.Duration
			for _, s := range steps {
				if s.At < prevEnd {
					t.Fatalf("seed %d %v: %s overlaps the previous step (ends %s)", seed, ks, s, prevEnd)
				}
				prevEnd = s.end()
				if s.Kind == Kill {
					kills++
					if len(s.Cuts) != 0 || s.Node != 3 {
						t.Fatalf("seed %d: kill step %s", seed, s)
					}
					if s.At < p.Duration/3 {
						t.Fatalf("seed %d: kill before a third of the run: %s", seed, s)
					}
					continue
				}
				// The node killed before this step has rejoined (the runner
				// rejoins it within the kill step, and skips a cut that would
				// leave node 1 in a minority while it is still down,
				// TestRunnerNodeDownNeverLeavesKeepInMinority).
				if !KeepsQuorum(3, 1, nil, s.Cuts) {
					t.Fatalf("seed %d %v: %s leaves node 1 in a minority", seed, ks, s)
				}
			}
			if kills != 1 {
				t.Fatalf("seed %d %v: %d kills in a 7 min schedule, want 1", seed, ks, kills)
			}
		}
	}
}
