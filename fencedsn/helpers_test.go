package fencedsn

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
)

func ctxOpen(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// reachable skips t (or fails it under FENCE_REQUIRE_DBS=1) when the test
// server of dialect is down.
func reachable(t *testing.T, dialect fence.Dialect) string {
	t.Helper()
	dsn, env := testdb.PostgresDSN(), "FENCE_TEST_POSTGRES"
	if dialect == fence.MySQL {
		dsn, env = testdb.MySQLDSN(), "FENCE_TEST_MYSQL"
	}
	s, err := Open(ctxOpen(t), dsn)
	if err != nil {
		testdb.Unreachable(t, string(dialect), env, err)
	}
	s.Close()
	return dsn
}
