// Command fence-bench runs the benchmark engine against one database and
// prints the table (or JSON): what `fence bench` does, for use until the
// CLI carries the subcommand, and for the exact commands in
// docs/BENCHMARKS.md.
//
//	go run ./internal/bench/cmd/fence-bench --dsn postgres://postgres@127.0.0.1:5432/test [--scale] [--json]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/fencekit/fence/internal/bench"
)

func main() {
	var (
		cfg   bench.Config
		dsn   = flag.String("dsn", os.Getenv("FENCE_DSN"), "database DSN (default $FENCE_DSN)")
		asJS  = flag.Bool("json", false, "print a JSON list instead of the table")
		quick = flag.Bool("quick", false, "a few operations of each case only: checks that it runs, not how fast")
		steps = flag.String("steps", "", "with --scale, only these experiments (comma-separated: batch,runner,handoff,crash,many)")
	)
	flag.IntVar(&cfg.Rounds, "rounds", 5, "each case runs `N` × --budget in all, interleaved with the others")
	flag.DurationVar(&cfg.Budget, "budget", 200*time.Millisecond, "time per case per round")
	flag.IntVar(&cfg.Batch, "batch", 1, "operations of one case back to back before the next case's turn")
	flag.BoolVar(&cfg.Scale, "scale", false, "also run the scale experiments (a minute or more)")
	flag.Parse()
	if *dsn == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: fence-bench --dsn DSN [--scale] [--json] [--quick] [--rounds N] [--budget D]")
		os.Exit(64)
	}
	if *quick {
		cfg.Rounds, cfg.Budget, cfg.MinOps = 1, 20*time.Millisecond, 2
		cfg.ScaleConfig.Quick = true
	}
	if *steps != "" {
		cfg.ScaleConfig.Steps = strings.Split(*steps, ",")
	}
	cfg.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rs, err := bench.Run(ctx, *dsn, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence-bench:", err)
		os.Exit(1)
	}
	if *asJS {
		err = bench.WriteJSON(os.Stdout, rs)
	} else {
		err = bench.WriteTable(os.Stdout, rs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence-bench:", err)
		os.Exit(1)
	}
}
