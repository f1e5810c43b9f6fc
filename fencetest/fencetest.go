// Package fencetest is the conformance suite every fence database package
// runs against a real database: the same invariants and the same adversarial
// cases for SQLite, PostgreSQL and MySQL/MariaDB. A new database package is
// done when Run passes against it.
//
//	func TestConformance(t *testing.T) {
//		fencetest.Run(t, fencetest.Backend{Name: "postgres", Open: openStore})
//	}
package fencetest

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
)

// Backend tells the suite how to reach one database.
type Backend struct {
	Name string
	// Open returns a migrated store on its own connection pool over the
	// tables named with prefix, extra options applied. Two calls with one
	// prefix share tables (that is how the suite re-opens a store). It
	// registers cleanup that closes the store and drops the tables.
	Open func(t testing.TB, prefix string, opts ...fence.Option) *fence.Store
}

type suiteCase struct {
	name string
	fn   func(t *testing.T, b Backend)
}

// Run runs every conformance case against b, each on fresh tables and in
// parallel with the others.
func Run(t *testing.T, b Backend) {
	var cases []suiteCase
	for _, group := range [][]suiteCase{leaseCases(), writeCases(), shapeCases(), runCases(), runnerCases(), raceCases(), pruneCases(), rollbackCases(), sweepCases(), pageCases(), holderCases(), electCases(), oracleCases(), ledgerCases()} {
		cases = append(cases, group...)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, b)
		})
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// prefix returns fresh table names for one case.
func prefix() string { return testdb.Prefix() }
