package sqlite_test

import (
	"testing"

	"github.com/fencekit/fence/fencetest"
	"github.com/fencekit/fence/internal/teststore"
)

// Each prefix gets its own database file, so re-opening a prefix is a
// restart of the same database and parallel cases do not share a write lock.
func TestConformance(t *testing.T) {
	fencetest.Run(t, teststore.SQLite.Conformance(t))
}
