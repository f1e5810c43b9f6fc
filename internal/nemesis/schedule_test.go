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
