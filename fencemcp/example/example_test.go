package example

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRun plays the example on SQLite: the thawed agent is refused at each
// hop, and every step's effect landed once in the tool's table and once
// downstream.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := Run(ctx, &out, "sqlite:"+filepath.Join(t.TempDir(), "ex.db"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Refusals, Hops) {
		t.Fatalf("refusals %q, want %q", rep.Refusals, Hops)
	}
	for _, step := range []string{"reserve", "charge", "ship"} {
		if rep.Orders[step] != 1 || rep.Shipped[step] != 1 {
			t.Fatalf("step %s: %d order rows, %d shipments; want one each", step, rep.Orders[step], rep.Shipped[step])
		}
	}
	if err := rep.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	var sum bytes.Buffer
	rep.Summarize(&sum)
	if !strings.Contains(sum.String(), "OK: the zombie agent was refused at every hop") || strings.Contains(sum.String(), "NOT REFUSED") {
		t.Fatalf("summary:\n%s", sum.String())
	}
}

// TestCheckCatchesAMissedRefusal: Check and Summarize fail a story whose
// thawed agent got through a hop or whose effect landed twice.
func TestCheckCatchesAMissedRefusal(t *testing.T) {
	ok := func() *Report {
		return &Report{StaleEpoch: 7, NewEpoch: 9, Refusals: slices.Clone(Hops), Steps: []string{"a"},
			Orders: map[string]int{"a": 1}, Shipped: map[string]int{"a": 1}}
	}
	if err := ok().Check(); err != nil {
		t.Fatalf("a good story: %v", err)
	}
	r := ok()
	r.Refusals = slices.DeleteFunc(r.Refusals, func(h string) bool { return h == "MCP server" })
	if err := r.Check(); err == nil || !strings.Contains(err.Error(), "NOT refused at MCP server") {
		t.Fatalf("missing MCP refusal: %v", err)
	}
	var sum bytes.Buffer
	r.Summarize(&sum)
	if !strings.Contains(sum.String(), "NOT REFUSED") || !strings.Contains(sum.String(), "FAILED") {
		t.Fatalf("summary of a bad story:\n%s", sum.String())
	}
	r = ok()
	r.Shipped["a"] = 2
	if err := r.Check(); err == nil || !strings.Contains(err.Error(), "2 shipments") {
		t.Fatalf("duplicate shipment: %v", err)
	}
}
