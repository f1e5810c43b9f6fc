// Command fence-bench-peers measures fence next to its peers (a
// ShedLock-shaped lease, River's leader election SQL, advisory locks,
// GET_LOCK, a Redis lock) on one database, interleaved in one process, and
// then the contended scenario. `fence bench --peers` runs it; it is built
// from a module of its own (internal/bench/peers) so that fence does not
// link the Redis client:
//
//	cd internal/bench/peers && go build -o "$(go env GOPATH)/bin/" ./cmd/fence-bench-peers
//	FENCE_DSN=postgres://postgres@127.0.0.1:5432/test fence-bench-peers --json
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/fencekit/fence/internal/bench/peers"
)

func main() {
	var cfg peers.Config
	dsn := flag.String("dsn", os.Getenv("FENCE_DSN"), "database DSN (default $FENCE_DSN)")
	asJSON := flag.Bool("json", false, "print a JSON list instead of the table")
	quick := flag.Bool("quick", false, "a few operations of each case and short contended scenarios: checks that it runs, not how fast")
	flag.IntVar(&cfg.Bench.Rounds, "rounds", 5, "each case runs `N` × --budget in all, interleaved with the others in random order")
	flag.DurationVar(&cfg.Bench.Budget, "budget", 200*time.Millisecond, "time per case per round")
	flag.IntVar(&cfg.Bench.Batch, "batch", 1, "operations of one case back to back before the next case's turn")
	flag.StringVar(&cfg.Redis, "redis", "127.0.0.1:6379", "Redis `address` for the Redis lock; empty leaves it out")
	flag.DurationVar(&cfg.Contended, "contended", 2*time.Second, "how long each contended scenario runs")
	flag.IntVar(&cfg.Workers, "workers", 16, "workers of the contended scenario")
	flag.IntVar(&cfg.ContendedRounds, "contended-rounds", 3, "run every contended scenario `N` times, interleaved in a new random order each round, and report the medians")
	flag.Parse()
	if *dsn == "" || flag.NArg() > 0 || cfg.ContendedRounds < 1 {
		fmt.Fprintln(os.Stderr, "usage: fence-bench-peers [--dsn DSN] [--json] [--quick] [--rounds N] [--budget D] [--redis ADDR] [--contended D] [--contended-rounds N] [--workers N]")
		os.Exit(64)
	}
	if *quick {
		cfg.Bench.Rounds, cfg.Bench.Budget, cfg.Bench.MinOps = 1, 20*time.Millisecond, 2
		cfg.Contended = 200 * time.Millisecond
		cfg.ContendedRounds = 1
	}
	cfg.Bench.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rows, err := peers.Run(ctx, *dsn, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence-bench-peers:", err)
		os.Exit(1)
	}
	if *asJSON {
		err = peers.WriteJSON(os.Stdout, rows)
	} else {
		err = peers.WriteTable(os.Stdout, rows)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence-bench-peers:", err)
		os.Exit(1)
	}
}
