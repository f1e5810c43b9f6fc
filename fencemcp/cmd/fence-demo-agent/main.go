// Command fence-demo-agent plays fencemcp's zombie-agent story (package
// example): a scripted planner, an MCP server over streamable HTTP whose
// tool writes to the database and calls a downstream fencehttp service, an
// agent that freezes, a worker that takes over, and the thawed agent
// refused at every hop. It exits 0 only if every refusal happened and each
// effect landed once.
//
// fence demo agent runs this command: it lives in the fencemcp module so
// that the fence command and the core module link no MCP SDK. Install it
// next to fence:
//
//	go install github.com/fencekit/fence/fencemcp/cmd/fence-demo-agent@latest
//	cd fencemcp && go build -o "$(dirname "$(command -v fence)")" ./cmd/fence-demo-agent   # from a checkout
//
// Usage:
//
//	fence-demo-agent [--dsn DSN]
//
// Without --dsn the database is SQLite in a temporary directory, removed
// afterwards. With --dsn (PostgreSQL, MySQL/MariaDB or SQLite) the demo
// migrates fence's schema there and creates its own tables under a fresh
// prefix (fmx<hex>_), which it leaves for inspection.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fencekit/fence/fencemcp/example"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("fence-demo-agent", flag.ContinueOnError)
	fl.SetOutput(stderr)
	dsn := fl.String("dsn", "", "database `DSN` (default: SQLite in a temporary directory)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "fence-demo-agent: unexpected argument %q (the only flag is --dsn)\n", fl.Arg(0))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if *dsn == "" {
		dir, err := os.MkdirTemp("", "fence-demo-agent-")
		if err != nil {
			fmt.Fprintln(stderr, "fence-demo-agent:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		*dsn = "sqlite:" + filepath.Join(dir, "demo.db")
	}
	rep, err := example.Run(ctx, stdout, *dsn)
	if err != nil {
		fmt.Fprintln(stderr, "fence-demo-agent:", err)
		return 1
	}
	rep.Summarize(stdout)
	if err := rep.Check(); err != nil {
		return 1
	}
	return 0
}
