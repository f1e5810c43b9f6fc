package main

import (
	"flag"
	"os"
	"testing"
)

// TestPgxUsageError: --pgx with a DSN that is not PostgreSQL is a usage
// error (exit 2) before anything runs.
func TestPgxUsageError(t *testing.T) {
	old, oldFlags := os.Args, flag.CommandLine
	defer func() { os.Args, flag.CommandLine = old, oldFlags }()
	// run defines its flags on flag.CommandLine: a fresh set lets the test
	// run more than once in a process (go test -count=2).
	flag.CommandLine = flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	os.Args = []string{"fence-torture", "--pgx", "--dsn", "mysql://root@127.0.0.1:3306/test", "--duration", "1s"}
	if rc := run(); rc != 2 {
		t.Fatalf("exit %d, want 2", rc)
	}
}
