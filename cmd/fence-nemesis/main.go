// Command fence-nemesis sets up and tears down the network namespaces the
// partition nemesis cuts (internal/nemesis), for the cluster scripts in
// clusters/: each node gets namespace PREFIXi with address SUBNET.i on a
// bridge whose root-namespace address is SUBNET.254. Needs root.
//
//	fence-nemesis up   --prefix fn --nodes 3 --subnet 10.77.0
//	fence-nemesis heal --prefix fn --nodes 3 --subnet 10.77.0   # remove every cut
//	fence-nemesis drops --prefix fn --nodes 3 --subnet 10.77.0  # list the cuts in place
//	fence-nemesis down --prefix fn --nodes 3 --subnet 10.77.0
//	fence-nemesis schedule --seed 42 --duration 60s --ttl 2s --failover-timeout 6s --keep 1  # print a schedule
//
// The faults themselves are played by fence-torture --nemesis, which draws
// them from its seed and writes them with the history.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/fencekit/fence/internal/nemesis"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: fence-nemesis up|down|heal|drops|schedule [flags]")
		return 2
	}
	fs := flag.NewFlagSet("fence-nemesis "+args[0], flag.ContinueOnError)
	var n nemesis.Net
	fs.StringVar(&n.Prefix, "prefix", "fn", "namespace prefix")
	fs.IntVar(&n.Nodes, "nodes", 3, "nodes")
	fs.StringVar(&n.Subnet, "subnet", "10.77.0", "first three octets of the /24")
	seed := fs.Uint64("seed", 1, "schedule: seed")
	kinds := fs.String("kinds", "all", "schedule: fault kinds")
	dur := fs.Duration("duration", time.Minute, "schedule: duration")
	ttl := fs.Duration("ttl", 2*time.Second, "schedule: lease TTL")
	fo := fs.Duration("failover-timeout", 6*time.Second, "schedule: the cluster's failover timeout")
	keep := fs.Int("keep", 0, "schedule: a node never cut off into a minority")
	kill := fs.Int("kill", 0, "schedule: a node SIGKILLed once, a third into the run, and rejoined (partitions.sh: 3)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ctx := context.Background()
	var err error
	switch args[0] {
	case "up":
		err = n.Up(ctx)
	case "down":
		_ = n.Heal(ctx) // the namespaces may already be gone
		err = n.Down(ctx)
	case "heal":
		err = n.Heal(ctx)
	case "drops":
		var cuts [][2]int
		if cuts, err = n.Drops(ctx); err == nil {
			for _, c := range cuts {
				fmt.Printf("%d->%d\n", c[0], c[1])
			}
		}
	case "schedule":
		var ks []string
		if ks, err = nemesis.ParseKinds(*kinds); err == nil {
			var steps []nemesis.Step
			steps, err = nemesis.Generate(rand.New(rand.NewPCG(*seed, 3<<32)), nemesis.Plan{Nodes: n.Nodes, Kinds: ks, Duration: *dur, TTL: *ttl, FailoverTimeout: *fo, Keep: *keep, Kill: *kill})
			for _, s := range steps {
				fmt.Println(s)
			}
		}
	default:
		err = fmt.Errorf("unknown command %q (want up, down, heal, drops or schedule)", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence-nemesis:", err)
		return 1
	}
	return 0
}
