package postgres_test

import (
	"testing"

	"github.com/fencekit/fence/fencetest"
	"github.com/fencekit/fence/internal/teststore"
)

func TestConformance(t *testing.T) {
	fencetest.Run(t, teststore.Postgres.Conformance(t))
}

// TestConformancePgx runs the suite on the pgx-native store: fence.OpenPool
// over a pgxpool, and the cases' own SQL, transactions and fenced writes
// through pgx (ExecPgx, InPgxTx, CheckPgxTx, ExecResourcePgx).
func TestConformancePgx(t *testing.T) {
	fencetest.Run(t, teststore.Pgx.Conformance(t))
}
