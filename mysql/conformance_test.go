package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencetest"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/mysql"
)

func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Backend{
		Name: "mysql",
		Open: func(t testing.TB, prefix string, opts ...fence.Option) *fence.Store {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db, err := mysql.Open(testdb.MySQLDSN())
			if err != nil {
				t.Fatal(err)
			}
			if err := db.PingContext(ctx); err != nil {
				db.Close()
				testdb.Unreachable(t, "mysql", "FENCE_TEST_MYSQL", err)
			}
			s, err := fence.OpenDB(db, fence.MySQL, append([]fence.Option{fence.WithPrefix(prefix)}, opts...)...)
			if err != nil {
				db.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() {
				s.Close()
				db.Close()
				dropTables(t, prefix)
			})
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

// dropTables drops prefix's tables over a pool of its own: some cases close
// the store's handle to simulate losing the database. Every store on a prefix
// drops them; the second drop is a no-op.
func dropTables(t testing.TB, prefix string) {
	db, err := mysql.Open(testdb.MySQLDSN())
	if err != nil {
		t.Error(err)
		return
	}
	defer db.Close()
	d, err := mysql.New(db, prefix)
	if err == nil {
		err = d.DropTables(context.Background())
	}
	if err != nil {
		t.Errorf("drop tables of %s: %v", prefix, err)
	}
}
