package nemesis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The helper modes run inside a namespace (ip netns exec … this test
// binary): dial or listen there, as a database node or a peer would.
func TestMain(m *testing.M) {
	switch {
	case os.Getenv("NEMESIS_TEST_DIAL") != "":
		c, err := net.DialTimeout("tcp", os.Getenv("NEMESIS_TEST_DIAL"), time.Second)
		if err != nil {
			os.Exit(3)
		}
		c.Close()
		os.Exit(0)
	case os.Getenv("NEMESIS_TEST_LISTEN") != "":
		l, err := net.Listen("tcp", os.Getenv("NEMESIS_TEST_LISTEN"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(4)
		}
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(5)
			}
			c.Close()
		}
	}
	os.Exit(m.Run())
}

func needNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (ip netns)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8)")
	}
}

// dialFrom reports whether a TCP connection from node ns (0: the root
// namespace) to addr opens within a second.
func dialFrom(t *testing.T, n Net, from int, addr string) bool {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	if from == 0 {
		cmd = exec.Command(self)
	} else {
		cmd = exec.Command("ip", "netns", "exec", n.NS(from), self)
	}
	cmd.Env = append(os.Environ(), "NEMESIS_TEST_DIAL="+addr)
	return cmd.Run() == nil
}

// A real cut on the real kernel: node 1's blackhole route to node 2 stops
// its connections to node 2 while the root namespace (the clients) still
// reaches both; Heal restores it; Down removes everything.
func TestNetCutsAndHeals(t *testing.T) {
	needNetns(t)
	ctx := context.Background()
	n := Net{Prefix: fmt.Sprintf("fnt%d", os.Getpid()%10000), Nodes: 3, Subnet: "10.79.0"}
	if err := n.Up(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Down(context.Background()); err != nil {
			t.Error(err)
		}
	})
	self, _ := os.Executable()
	addr2 := n.Addr(2) + ":7000"
	l := exec.Command("ip", "netns", "exec", n.NS(2), self)
	l.Env = append(os.Environ(), "NEMESIS_TEST_LISTEN="+addr2)
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Process.Kill(); _ = l.Wait() })
	up := false
	for range 100 { // the listener starts: wait for it, bounded
		if up = dialFrom(t, n, 0, addr2); up {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !up {
		t.Fatal("the listener in node 2's namespace never answered the root namespace")
	}
	if !dialFrom(t, n, 1, addr2) {
		t.Fatal("node 1 cannot reach node 2 before any cut")
	}
	if err := n.Drop(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	if dialFrom(t, n, 1, addr2) {
		t.Fatal("node 1 reaches node 2 through the cut")
	}
	if !dialFrom(t, n, 3, addr2) || !dialFrom(t, n, 0, addr2) {
		t.Fatal("the cut 1->2 also cut node 3 or the clients from node 2")
	}
	cuts, err := n.Drops(ctx)
	if err != nil || len(cuts) != 1 || cuts[0] != [2]int{1, 2} {
		t.Fatalf("drops in place: %v %v", cuts, err)
	}
	if err := n.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if !dialFrom(t, n, 1, addr2) {
		t.Fatal("node 1 cannot reach node 2 after the heal")
	}
	// Runner: a schedule of one cut, cancelled while the cut is held,
	// still heals.
	rec := &Record{Net: n, Steps: []Step{{At: 0, Kind: Isolate, Cuts: [][2]int{{1, 2}, {2, 1}}, Hold: time.Hour, Flaps: 1}}}
	rctx, cancel := context.WithCancel(ctx)
	cutDone := make(chan struct{})
	r := &Runner{Net: n, Rec: rec, Log: func(e Event, _ Step) {
		if e.What == "cut" {
			close(cutDone)
		}
	}}
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	<-cutDone
	if dialFrom(t, n, 1, addr2) {
		t.Fatal("the runner's cut let node 1 through")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if cuts, _ := n.Drops(ctx); len(cuts) != 0 {
		t.Fatalf("cancelled runner left cuts: %v", cuts)
	}
	if r.Counts()[Isolate] != 1 {
		t.Fatalf("counts: %v", r.Counts())
	}
}

// A run killed before its cleanup leaves its bridge on the subnet; the next
// Up on that subnet must take it down (else the root namespace routes the
// subnet to the stale bridge and no new node answers), and must refuse a
// subnet held by an interface this package did not make.
func TestUpReclaimsLeftoverOnItsSubnet(t *testing.T) {
	needNetns(t)
	ctx := context.Background()
	pid := os.Getpid() % 10000
	old := Net{Prefix: fmt.Sprintf("fno%d", pid), Nodes: 2, Subnet: "10.79.7"}
	if err := old.Up(ctx); err != nil {
		t.Fatal(err)
	}
	n := Net{Prefix: fmt.Sprintf("fnn%d", pid), Nodes: 2, Subnet: "10.79.7"}
	t.Cleanup(func() {
		_ = old.Down(context.Background())
		_ = n.Down(context.Background())
	})
	if err := n.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if linkExists(ctx, old.bridge()) {
		t.Errorf("the leftover bridge %s is still up", old.bridge())
	}
	have, err := n.namespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if have[old.NS(1)] || have[old.NS(2)] {
		t.Errorf("the leftover namespaces are still there: %v", have)
	}
	if !have[n.NS(1)] || !have[n.NS(2)] {
		t.Errorf("the new namespaces are missing: %v", have)
	}

	// A foreign interface on the subnet: a bridge not named like ours.
	foreign := fmt.Sprintf("fnx%dq", pid)
	if err := ip(ctx, "link", "add", foreign, "type", "bridge"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ip(context.Background(), "link", "del", foreign) })
	if err := ip(ctx, "addr", "add", "10.79.8.1/24", "dev", foreign); err != nil {
		t.Fatal(err)
	}
	m := Net{Prefix: fmt.Sprintf("fnm%d", pid), Nodes: 2, Subnet: "10.79.8"}
	t.Cleanup(func() { _ = m.Down(context.Background()) })
	err = m.Up(ctx)
	if err == nil || !strings.Contains(err.Error(), foreign) {
		t.Fatalf("Up on a subnet held by %s: %v; want a refusal naming it", foreign, err)
	}
}
