// Package nemesis cuts the network between a cluster's nodes on one machine,
// Jepsen-style: each node runs in a network namespace of its own with one
// address on a bridge, the clients stay in the root namespace (on the
// bridge's host address) and so reach every node on both sides of a cut,
// and a cut is a blackhole route inside the namespace of the node whose
// packets are dropped. Nothing outside the namespaces and the bridge this
// package created is touched (no iptables, no tc: neither is available on
// the machines this runs on).
//
// A schedule of faults (schedule.go) is drawn from a seed, written down with
// the run's history and replayable from that file (Runner, runner.go).
package nemesis

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// Net is a set of network namespaces, one per node, joined by a bridge in
// the root namespace. Node i (1-based) lives in namespace Prefix+"i" with
// the address Subnet.i/24; the root namespace has Subnet.254 on the bridge.
type Net struct {
	// Prefix names the namespaces (Prefix1, Prefix2, …), the bridge
	// (Prefix+"br") and the host ends of the veths (Prefix+"vN"); at most
	// 8 characters, letters and digits.
	Prefix string
	// Nodes is the number of nodes (2–9).
	Nodes int
	// Subnet is the first three octets of a /24 used for nothing else on
	// the machine, e.g. "10.77.0".
	Subnet string
}

var prefixRe = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)
var subnetRe = regexp.MustCompile(`^(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){2}$`)

// Validate says what is wrong with n's fields, if anything: they end up in
// interface names and ip(8) arguments.
func (n Net) Validate() error {
	if !prefixRe.MatchString(n.Prefix) {
		return fmt.Errorf("nemesis: prefix %q must be 1-8 lower-case letters and digits, starting with a letter", n.Prefix)
	}
	if n.Nodes < 2 || n.Nodes > 9 {
		return fmt.Errorf("nemesis: %d nodes; want 2 to 9", n.Nodes)
	}
	if !subnetRe.MatchString(n.Subnet) {
		return fmt.Errorf("nemesis: subnet %q must be three octets, e.g. 10.77.0", n.Subnet)
	}
	return nil
}

// NS is node i's namespace.
func (n Net) NS(i int) string { return fmt.Sprintf("%s%d", n.Prefix, i) }

// Addr is node i's address.
func (n Net) Addr(i int) string { return fmt.Sprintf("%s.%d", n.Subnet, i) }

// HostAddr is the root namespace's address on the bridge (the clients').
func (n Net) HostAddr() string { return n.Subnet + ".254" }

func (n Net) bridge() string    { return n.Prefix + "br" }
func (n Net) veth(i int) string { return fmt.Sprintf("%sv%d", n.Prefix, i) }

// ip runs ip(8) with args; its stderr is in the error.
func ip(ctx context.Context, args ...string) error {
	_, err := ipOut(ctx, args...)
	return err
}

func ipOut(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("nemesis: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Up creates the bridge, the namespaces and their veths (tearing down
// whatever an earlier run of the same prefix left first). It needs root.
func (n Net) Up(ctx context.Context) (err error) {
	if err := n.Validate(); err != nil {
		return err
	}
	if err := n.Down(ctx); err != nil {
		return err
	}
	if err := n.reclaimSubnet(ctx); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = n.Down(context.WithoutCancel(ctx))
		}
	}()
	br := n.bridge()
	for _, a := range [][]string{
		{"link", "add", br, "type", "bridge"},
		{"addr", "add", n.HostAddr() + "/24", "dev", br},
		{"link", "set", br, "up"},
	} {
		if err := ip(ctx, a...); err != nil {
			return err
		}
	}
	for i := 1; i <= n.Nodes; i++ {
		ns, v := n.NS(i), n.veth(i)
		for _, a := range [][]string{
			{"netns", "add", ns},
			{"link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"link", "set", v, "master", br},
			{"link", "set", v, "up"},
			{"-n", ns, "addr", "add", n.Addr(i) + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if err := ip(ctx, a...); err != nil {
				return err
			}
		}
	}
	return nil
}

// Down removes the namespaces and the bridge; what is not there is skipped.
// The processes still running in a namespace keep it alive but lose their
// veth (the caller stops its servers first).
func (n Net) Down(ctx context.Context) error {
	if err := n.Validate(); err != nil {
		return err
	}
	var errs []string
	have, err := n.namespaces(ctx)
	if err != nil {
		return err
	}
	for i := 1; i <= n.Nodes; i++ {
		if have[n.NS(i)] {
			if err := ip(ctx, "netns", "del", n.NS(i)); err != nil {
				errs = append(errs, err.Error())
			}
		}
		// Deleting the namespace deletes the veth's peer, and the kernel
		// then removes the host end on its own, a moment later: the link
		// seen here may be gone by the time it is deleted (seen in CI:
		// "Cannot find device"). Only a link that is still there is an error.
		if linkExists(ctx, n.veth(i)) {
			if err := ip(ctx, "link", "del", n.veth(i)); err != nil && linkExists(ctx, n.veth(i)) {
				errs = append(errs, err.Error())
			}
		}
	}
	if linkExists(ctx, n.bridge()) {
		if err := ip(ctx, "link", "del", n.bridge()); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("nemesis: tearing down %s: %s", n.Prefix, strings.Join(errs, "; "))
	}
	return nil
}

// reclaimSubnet removes another Net's bridge (and its namespaces) that
// still holds n's subnet: a run killed before its cleanup (CI stops its
// background steps that way) leaves its bridge up, and with two bridges on
// one /24 the root namespace's route goes to the stale one, so the new
// nodes cannot be reached (seen in CI: pg_auto_failover's monitor "timed
// out" while listening). A subnet is "used for nothing else on the
// machine" (Net.Subnet), so a bridge of this package's naming on it is a
// leftover; anything else on it is an error that says which interface.
func (n Net) reclaimSubnet(ctx context.Context) error {
	out, err := ipOut(ctx, "-o", "-4", "addr", "show")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[2] != "inet" || !strings.HasPrefix(f[3], n.Subnet+".") {
			continue
		}
		name := strings.SplitN(f[1], "@", 2)[0]
		other := Net{Prefix: strings.TrimSuffix(name, "br"), Nodes: 9, Subnet: n.Subnet}
		if !strings.HasSuffix(name, "br") || other.Validate() != nil {
			return fmt.Errorf("nemesis: subnet %s.0/24 is already on interface %s, which this package did not make; choose another subnet", n.Subnet, name)
		}
		if err := other.Down(ctx); err != nil {
			return fmt.Errorf("nemesis: removing %s, left on subnet %s.0/24 by an earlier run: %w", name, n.Subnet, err)
		}
	}
	return nil
}

func linkExists(ctx context.Context, name string) bool {
	return ip(ctx, "link", "show", "dev", name) == nil
}

func (n Net) namespaces(ctx context.Context) (map[string]bool, error) {
	out, err := ipOut(ctx, "netns", "list")
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			have[f[0]] = true
		}
	}
	return have, nil
}

// Drop makes node from drop every packet it sends to node to (a blackhole
// route in from's namespace). Drop(a, b) alone is a one-way cut; with
// Drop(b, a) the two are cut both ways. The root namespace (the clients)
// is never cut.
func (n Net) Drop(ctx context.Context, from, to int) error {
	if from < 1 || from > n.Nodes || to < 1 || to > n.Nodes || from == to {
		return fmt.Errorf("nemesis: no cut from node %d to node %d among %d nodes", from, to, n.Nodes)
	}
	return ip(ctx, "-n", n.NS(from), "route", "replace", "blackhole", n.Addr(to)+"/32")
}

// Heal removes every blackhole route from every node's namespace.
func (n Net) Heal(ctx context.Context) error {
	var errs []string
	for i := 1; i <= n.Nodes; i++ {
		// Not "route flush type blackhole": ip 6.x exits 2 on an empty flush
		// in some versions; read the routes and delete them one by one.
		out, err := ipOut(ctx, "-n", n.NS(i), "route", "show", "type", "blackhole")
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) < 2 || f[0] != "blackhole" {
				continue
			}
			if err := ip(ctx, "-n", n.NS(i), "route", "del", "blackhole", f[1]); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("nemesis: healing %s: %s", n.Prefix, strings.Join(errs, "; "))
	}
	return nil
}

// Drops lists the cuts in place, as (from, to) pairs.
func (n Net) Drops(ctx context.Context) ([][2]int, error) {
	var cuts [][2]int
	for i := 1; i <= n.Nodes; i++ {
		out, err := ipOut(ctx, "-n", n.NS(i), "route", "show", "type", "blackhole")
		if err != nil {
			return nil, err
		}
		for j := 1; j <= n.Nodes; j++ {
			if j != i && (strings.Contains(out, "blackhole "+n.Addr(j)+" ") || strings.Contains(out, "blackhole "+n.Addr(j)+"\n")) {
				cuts = append(cuts, [2]int{i, j})
			}
		}
	}
	return cuts, nil
}
