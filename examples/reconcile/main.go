// Command reconcile is the article's OwnerReconciler on fence: a singleton
// job that scans items for owners that differ from their expected owner,
// fixes each mismatch and writes a report, under the lease
// admin:reconciliation. Every result write and the run's completion carry
// the lease's fence token and are checked by the database in the statement
// that writes, so a worker that stalled past its TTL and was replaced cannot
// commit anything when it resumes.
//
// With no arguments it plays the article's story with two workers in one
// process on a temporary SQLite file, and prints it as a timeline:
//
//	go run ./examples/reconcile
//	go run ./examples/reconcile -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// "worker" runs one reconciliation under fence.Run and exits with a status
// that says how it ended (0 completed, 3 not acquired, 4 lost, 5 completion
// rejected, 1 failed). Run two and freeze the first with SIGSTOP to see the
// story across processes:
//
//	go build -o reconcile ./examples/reconcile
//	./reconcile worker -dsn sqlite:fence.db -seed -name A -ttl 2s -work 10s & sleep 1
//	kill -STOP $!; sleep 3; ./reconcile worker -dsn sqlite:fence.db -name B; kill -CONT $!; wait
//
// The fence covers the writes that carry the token, here every write of the
// job. It does not make the job exactly-once: a stale worker still burns CPU
// and still scans, and anything it sent outside this database (an e-mail, an
// API call) would need an idempotency key or a fence of its own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// Exit statuses of worker mode, one per way a run can end.
const (
	exitCompleted   = 0
	exitFailed      = 1
	exitUsage       = 2
	exitNotAcquired = 3
	exitLost        = 4
	exitRejected    = 5
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "worker" {
		return workerMain(ctx, args[1:], stdout, stderr)
	}
	return demoMain(ctx, args, stdout, stderr)
}

func demoMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: reconcile [-dsn DSN] [-prefix P] [-ttl D]\n       reconcile worker -h\n\n"+
			"Plays the article's story with two workers, A and B, in one process.\n\n")
		fs.PrintDefaults()
	}
	// Not $FENCE_DSN: the demo reseeds its tables, so it touches a real
	// database only when asked to by name.
	dsn := fs.String("dsn", "", "database (sqlite:PATH, postgres://…, mysql://…); default: a temporary SQLite file")
	prefix := fs.String("prefix", fence.DefaultPrefix, "table prefix for fence's tables and the example's items and reports")
	ttl := fs.Duration("ttl", time.Second, "A's lease TTL: how long A's stall must last for B to take over")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	if err := demo(ctx, stdout, *dsn, *prefix, *ttl); err != nil {
		fmt.Fprintln(stderr, "reconcile:", err)
		return exitFailed
	}
	return exitCompleted
}

func workerMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reconcile worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: reconcile worker [flags]\n\n"+
			"Runs one reconciliation under fence.Run and exits 0 completed, 3 not acquired,\n"+
			"4 lost, 5 completion rejected, 1 failed.\n\n")
		fs.PrintDefaults()
	}
	dsn := os.Getenv("FENCE_DSN")
	if dsn == "" {
		dsn = fencedsn.Default
	}
	var c workerConfig
	fs.StringVar(&c.dsn, "dsn", dsn, "database (sqlite:PATH, postgres://…, mysql://…); default $FENCE_DSN, else "+fencedsn.Default)
	fs.StringVar(&c.prefix, "prefix", fence.DefaultPrefix, "table prefix")
	fs.StringVar(&c.name, "name", "worker", "name printed before each line")
	fs.DurationVar(&c.ttl, "ttl", 5*time.Second, "lease TTL (renewed every TTL/3)")
	fs.DurationVar(&c.work, "work", 0, "how long the job works between its scan and its writes")
	fs.BoolVar(&c.wait, "wait", false, "wait for the lease instead of exiting 3 when it is held")
	fs.BoolVar(&c.heedless, "heedless", false, "ignore the job's cancellation, so that only the fence stops stale writes")
	fs.BoolVar(&c.seed, "seed", false, "replace the items with the demo's before running")
	fs.BoolVar(&c.verbose, "v", false, "log the runner's renewals and decisions to stderr")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	return worker(ctx, stdout, stderr, c)
}

// describeLoss says in one line why a worker's token lost its authority,
// from the lease row as the database has it now.
func describeLoss(ctx context.Context, s *fence.Store, t fence.Token, err error) string {
	if li, gerr := s.Get(context.WithoutCancel(ctx), t.Lease); gerr == nil && li.Fence > t.Fence {
		return fmt.Sprintf("lease %q fence %d superseded by fence %d", t.Lease, t.Fence, li.Fence)
	}
	var le *fence.LostError
	if errors.As(err, &le) {
		return le.Error()
	}
	return fmt.Sprintf("lease %q fence %d: %v", t.Lease, t.Fence, err)
}
