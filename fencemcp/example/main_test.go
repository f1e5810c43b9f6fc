package main

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestRun plays the example on SQLite: the thawed agent is refused at each
// hop, and every step's effect landed once in the tool's table and once
// downstream.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, io.Discard, "sqlite:"+filepath.Join(t.TempDir(), "ex.db"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"downstream HTTP", "tool's DB write", "its charge call", "its own ledger", "MCP server"}
	if !slices.Equal(rep.Refusals, want) {
		t.Fatalf("refusals %q, want %q", rep.Refusals, want)
	}
	for _, step := range []string{"reserve", "charge", "ship"} {
		if rep.Orders[step] != 1 || rep.Shipped[step] != 1 {
			t.Fatalf("step %s: %d order rows, %d shipments; want one each", step, rep.Orders[step], rep.Shipped[step])
		}
	}
}
