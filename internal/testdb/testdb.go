// Package testdb finds the databases the test suites run against. A suite
// whose database is unreachable is skipped with a message that says how to
// point it elsewhere, unless FENCE_REQUIRE_DBS=1, when it fails instead: CI
// sets that so a missing database can never pass silently.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// Default DSNs of the local services.
const (
	DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultMySQL    = "mysql://root@127.0.0.1:3306/test"
)

// PostgresDSN returns FENCE_TEST_POSTGRES or the local default.
func PostgresDSN() string { return env("FENCE_TEST_POSTGRES", DefaultPostgres) }

// MySQLDSN returns FENCE_TEST_MYSQL or the local default.
func MySQLDSN() string { return env("FENCE_TEST_MYSQL", DefaultMySQL) }

// Required reports whether FENCE_REQUIRE_DBS=1.
func Required() bool { return os.Getenv("FENCE_REQUIRE_DBS") == "1" }

// Unreachable skips t, or fails it when databases are required.
func Unreachable(t testing.TB, name, envVar string, err error) {
	t.Helper()
	if Required() {
		t.Fatalf("%s suite required (FENCE_REQUIRE_DBS=1) but the database is unreachable: %v", name, err)
	}
	t.Skipf("SKIP %s suite: database unreachable (%v); set %s to a reachable DSN, or FENCE_REQUIRE_DBS=1 to fail instead", name, err, envVar)
}

// Prefix returns a fresh table prefix so parallel tests and packages never
// share tables.
func Prefix() string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "t" + hex.EncodeToString(b[:]) + "_"
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// GaleraDSNs returns the node DSNs of a MariaDB Galera cluster from
// FENCE_TEST_GALERA (comma-separated, e.g. clusters/galera/galera.sh dsns),
// or nil when it is unset: the Galera suites need a cluster of their own
// and run only when given one; FENCE_REQUIRE_DBS=1 then makes an
// unreachable node fail them.
func GaleraDSNs() []string {
	v := os.Getenv("FENCE_TEST_GALERA")
	if v == "" {
		return nil
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// WorkTable creates the test's own table prefix+"work" (id, v) through exec
// and drops it when the test ends, so that a run against a shared database
// leaves nothing behind.
func WorkTable(t *testing.T, prefix string, exec func(ctx context.Context, q string) error) string {
	t.Helper()
	table := prefix + "work"
	if err := exec(context.Background(), "CREATE TABLE "+table+" (id INT PRIMARY KEY, v INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := exec(context.Background(), "DROP TABLE IF EXISTS "+table); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	return table
}

// LongEnv is the switch for the long suites: torture rounds, race rounds,
// fault and escape scenarios. The default `go test ./...` skips them so that
// a newcomer's run finishes in about a minute; .ci/run sets it.
const LongEnv = "FENCE_LONG"

// LongEnabled reports whether FENCE_LONG=1.
func LongEnabled() bool { return os.Getenv(LongEnv) == "1" }

// Long skips t unless FENCE_LONG=1, saying how to run it.
func Long(t testing.TB) {
	t.Helper()
	if !LongEnabled() {
		t.Skipf("SKIP long test: set %s=1 to run it (.ci/run does)", LongEnv)
	}
}
