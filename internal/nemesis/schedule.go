package nemesis

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
)

// Fault kinds.
const (
	// Split cuts a minority of the nodes from the majority, both ways.
	Split = "split"
	// Isolate cuts one node from every other node, both ways; its clients
	// (the root namespace) still reach it. With three nodes it is the
	// split of one node; Plan.Target picks which node (a PostgreSQL
	// primary).
	Isolate = "isolate"
	// Bridge cuts two nodes from each other, both ways; a third sees both.
	Bridge = "bridge"
	// OneWay drops the packets one node sends to another, not the reverse.
	OneWay = "oneway"
	// FlapShort cuts and heals one node's links again and again, each cut
	// shorter than the lease TTL.
	FlapShort = "flap-short"
	// FlapLong does the same with cuts longer than the TTL and than the
	// cluster's failover timeout.
	FlapLong = "flap-long"
	// Kill is a process fault, not a network one: node Step.Node is
	// SIGKILLed, kept down for Hold, then rejoined (Runner.Procs). It is
	// not drawn from Kinds: Plan.Kill puts one in the schedule. No cut is
	// held while the node is down or rejoining (the steps never overlap),
	// and a killed node is only killed when the cluster is whole: with a
	// node down, any further cut could leave Keep in a minority (issue 31:
	// node 3 killed while node 2 was cut off left node 1 alone).
	Kill = "kill"
)

// Kinds lists every fault kind.
var Kinds = []string{Split, Isolate, Bridge, OneWay, FlapShort, FlapLong}

// ParseKinds parses a comma-separated list of kinds, or "all".
func ParseKinds(s string) ([]string, error) {
	var ks []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case k == "":
		case k == "all":
			ks = append(ks, Kinds...)
		case slices.Contains(Kinds, k):
			ks = append(ks, k)
		default:
			return nil, fmt.Errorf("nemesis: unknown fault %q (want %s or all)", k, strings.Join(Kinds, ", "))
		}
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("nemesis: no fault kinds in %q", s)
	}
	return ks, nil
}

// Plan is what a schedule is drawn from.
type Plan struct {
	Nodes int
	Kinds []string
	// Duration bounds the schedule: no cut starts after it, every cut
	// heals by it (plus the longest hold).
	Duration time.Duration
	// TTL is the lease TTL; FailoverTimeout the time after which the
	// cluster replaces a node it cannot reach (Galera: evs.suspect_timeout
	// plus the view change; PostgreSQL: the manager's timeout). Hold times
	// are drawn below and above both.
	TTL, FailoverTimeout time.Duration
	// Keep, when not 0, is a node never put in a minority or on the
	// dropping side of a one-way cut (the harness's own node, whose view
	// of the cluster orders the checks).
	Keep int
	// Kill, when not 0, is a node SIGKILLed once, KillAt into the schedule
	// (0: a third of Duration), and rejoined after KillDown (0: 5 s).
	Kill             int
	KillAt, KillDown time.Duration
}

// Step is one fault of a schedule: at At (since the schedule started) the
// Cuts are put in place, held for Hold, then healed; a flap repeats that
// Flaps times with Gap healed in between.
type Step struct {
	At    time.Duration `json:"at_ns"`
	Kind  string        `json:"kind"`
	Cuts  [][2]int      `json:"cuts"` // (from, to): from drops what it sends to
	Hold  time.Duration `json:"hold_ns"`
	Flaps int           `json:"flaps,omitempty"`
	Node  int           `json:"node,omitempty"` // Kill: the node killed
	Gap   time.Duration `json:"gap_ns,omitempty"`
}

func (s Step) String() string {
	if s.Kind == Kill {
		return fmt.Sprintf("kill at %s: node %d down for %s, then rejoined", s.At.Round(time.Millisecond), s.Node, s.Hold.Round(time.Millisecond))
	}
	c := make([]string, len(s.Cuts))
	for i, p := range s.Cuts {
		c[i] = fmt.Sprintf("%d->%d", p[0], p[1])
	}
	f := ""
	if s.Flaps > 1 {
		f = fmt.Sprintf(" x%d gap %s", s.Flaps, s.Gap.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s at %s: drop %s for %s%s", s.Kind, s.At.Round(time.Millisecond), strings.Join(c, ","), s.Hold.Round(time.Millisecond), f)
}

// end is when the step's last cut heals.
func (s Step) end() time.Duration {
	n := max(s.Flaps, 1)
	return s.At + time.Duration(n)*s.Hold + time.Duration(n-1)*s.Gap
}

// Generate draws a schedule from rng: a fault every 1–3 s of quiet after
// the previous one healed, the kinds in turn from a shuffled list so that
// every kind comes up in a run long enough, the nodes at random.
func Generate(rng *rand.Rand, p Plan) ([]Step, error) {
	if p.Nodes < 2 {
		return nil, fmt.Errorf("nemesis: a schedule needs 2 or more nodes, not %d", p.Nodes)
	}
	if len(p.Kinds) == 0 || p.Duration <= 0 || p.TTL <= 0 || p.FailoverTimeout <= 0 {
		return nil, fmt.Errorf("nemesis: a plan needs kinds, a duration, a TTL and a failover timeout")
	}
	if p.Nodes < 3 && slices.Contains(p.Kinds, Bridge) {
		return nil, fmt.Errorf("nemesis: a bridge needs 3 nodes")
	}
	if p.Kill != 0 && (p.Kill < 1 || p.Kill > p.Nodes || p.Kill == p.Keep) {
		return nil, fmt.Errorf("nemesis: cannot kill node %d of %d (kept: %d)", p.Kill, p.Nodes, p.Keep)
	}
	killAt, killDown := p.KillAt, p.KillDown
	if killAt <= 0 {
		killAt = p.Duration / 3
	}
	if killDown <= 0 {
		killDown = 5 * time.Second
	}
	killed := p.Kill == 0
	ms := func(lo, hi time.Duration) time.Duration { // uniform in [lo, hi)
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	long := max(p.TTL, p.FailoverTimeout)
	var steps []Step
	var order []string
	t := ms(time.Second, 3*time.Second)
	for i := 0; t < p.Duration && i < 10000; i++ {
		if len(order) == 0 {
			order = slices.Clone(p.Kinds)
			rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		}
		if !killed && t >= killAt {
			// The kill takes the place of a cut: nothing else is cut while
			// the node is down (the runner shifts the steps after it by the
			// time the rejoin took).
			killed = true
			s := Step{At: t, Kind: Kill, Node: p.Kill, Hold: killDown, Flaps: 1}
			steps = append(steps, s)
			t = s.end() + ms(time.Second, 3*time.Second)
			continue
		}
		k := order[0]
		order = order[1:]
		s := Step{At: t, Kind: k, Flaps: 1}
		// A node the plan lets be cut off (not Keep).
		victim := func() int {
			for range 100 {
				if v := 1 + rng.IntN(p.Nodes); v != p.Keep {
					return v
				}
			}
			return 1 + (p.Keep % p.Nodes)
		}
		both := func(a, b int) { s.Cuts = append(s.Cuts, [2]int{a, b}, [2]int{b, a}) }
		switch k {
		case Split, Isolate:
			minority := map[int]bool{}
			size := 1
			if k == Split {
				size = (p.Nodes - 1) / 2
			}
			for len(minority) < size {
				minority[victim()] = true
			}
			for a := 1; a <= p.Nodes; a++ {
				for b := a + 1; b <= p.Nodes; b++ {
					if minority[a] != minority[b] {
						both(a, b)
					}
				}
			}
			// Past the failover timeout half of the time: the cluster
			// must replace the node; below it, it must not have to.
			s.Hold = ms(long/2, 2*long+time.Second)
		case Bridge:
			a := victim()
			b := a
			for b == a {
				b = victim()
			}
			both(a, b)
			s.Hold = ms(long/2, 2*long+time.Second)
		case OneWay:
			a := victim()
			b := 1 + rng.IntN(p.Nodes)
			for b == a {
				b = 1 + rng.IntN(p.Nodes)
			}
			s.Cuts = [][2]int{{a, b}}
			s.Hold = ms(long/2, 2*long+time.Second)
		case FlapShort, FlapLong:
			v := victim()
			for o := 1; o <= p.Nodes; o++ {
				if o != v {
					both(v, o)
				}
			}
			if k == FlapShort {
				s.Hold = ms(p.TTL/4, p.TTL)
				s.Flaps = 4 + rng.IntN(8)
				s.Gap = ms(p.TTL/4, 2*p.TTL)
			} else {
				s.Hold = ms(long+long/10, long*3/2+time.Second)
				s.Flaps = 2 + rng.IntN(2)
				s.Gap = ms(p.TTL/2, 2*p.TTL+500*time.Millisecond)
			}
		}
		steps = append(steps, s)
		t = s.end() + ms(time.Second, 3*time.Second)
	}
	return steps, nil
}

// KeepsQuorum reports whether node keep is in a primary component when the
// nodes in down are dead and the cuts are held: some set of live nodes that
// contains keep, every two of them linked both ways (a cut either way
// breaks a link), is a strict majority of all nodes. Galera's quorum is
// counted against the last primary view, which is at least as lenient;
// this is the conservative rule the runner holds to.
func KeepsQuorum(nodes, keep int, down map[int]bool, cuts [][2]int) bool {
	if keep == 0 {
		return true
	}
	if down[keep] {
		return false
	}
	cut := map[[2]int]bool{}
	for _, c := range cuts {
		cut[c] = true
		cut[[2]int{c[1], c[0]}] = true
	}
	best := 0
	// Every set of live nodes with keep in it (bit i-1: node i).
	for m := 0; m < 1<<nodes; m++ {
		if m&(1<<(keep-1)) == 0 {
			continue
		}
		var in []int
		ok := true
		for i := 1; i <= nodes && ok; i++ {
			if m&(1<<(i-1)) == 0 {
				continue
			}
			if down[i] {
				ok = false
				break
			}
			for _, j := range in {
				if cut[[2]int{i, j}] {
					ok = false
					break
				}
			}
			in = append(in, i)
		}
		if ok && len(in) > best {
			best = len(in)
		}
	}
	return 2*best > nodes
}

// Record is a schedule as written with a run's history: enough to run the
// same faults again (Load) with the same seed for the clients.
type Record struct {
	Seed  uint64 `json:"seed"`
	Net   Net    `json:"net"`
	Plan  Plan   `json:"plan"`
	Steps []Step `json:"steps"`
	// Applied lists what was done, in order, with times since the run's
	// start (filled in by Runner).
	Applied []Event `json:"applied,omitempty"`
}

// Event is one action the runner took.
type Event struct {
	T    time.Duration `json:"t_ns"`
	Step int           `json:"step"`
	What string        `json:"what"` // "cut", "heal", or "error: …"
}

// Save writes r to path as JSON.
func (r *Record) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("nemesis: writing the schedule: %w", err)
	}
	return nil
}

// Load reads a schedule Save wrote, to replay it.
func Load(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("nemesis: reading a schedule to replay: %w", err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("nemesis: %s is not a schedule (%w)", path, err)
	}
	for i, s := range r.Steps {
		for _, c := range s.Cuts {
			if c[0] < 1 || c[1] < 1 || c[0] > r.Net.Nodes || c[1] > r.Net.Nodes || c[0] == c[1] {
				return nil, fmt.Errorf("nemesis: %s: step %d cuts %d->%d among %d nodes", path, i, c[0], c[1], r.Net.Nodes)
			}
		}
	}
	r.Applied = nil
	return &r, nil
}
