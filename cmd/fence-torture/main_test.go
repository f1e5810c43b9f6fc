package main

import (
	"os"
	"testing"
)

// TestPgxUsageError: --pgx with a DSN that is not PostgreSQL is a usage
// error (exit 2) before anything runs.
func TestPgxUsageError(t *testing.T) {
	old := os.Args
	defer func() { os.Args = old }()
	os.Args = []string{"fence-torture", "--pgx", "--dsn", "mysql://root@127.0.0.1:3306/test", "--duration", "1s"}
	if rc := run(); rc != 2 {
		t.Fatalf("exit %d, want 2", rc)
	}
}
