package mysql_test

import (
	"testing"

	"github.com/fencekit/fence/fencetest"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/internal/teststore"
)

func TestConformance(t *testing.T) {
	fencetest.Run(t, teststore.MySQL.Conformance(t))
}

// TestConformanceGalera runs the suite on a Galera cluster
// (FENCE_TEST_GALERA), each store on the next node.
func TestConformanceGalera(t *testing.T) {
	if len(testdb.GaleraDSNs()) == 0 {
		t.Skip("SKIP galera conformance: set FENCE_TEST_GALERA to the node DSNs of a Galera cluster (clusters/galera/galera.sh)")
	}
	fencetest.Run(t, teststore.Galera.Conformance(t))
}
