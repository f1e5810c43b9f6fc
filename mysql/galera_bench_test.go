package mysql_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/testdb"
)

// BenchmarkGaleraFencedWrite measures what the Galera guard costs
// (docs/CLUSTERS.md): a fenced write (Store.Exec of a one-row UPDATE) on the
// single server (FENCE_TEST_MYSQL: the share-lock predicate, one
// statement) and on one Galera node (a transaction: guard UPDATE of the
// lease row, the write, COMMIT with certification), one writer at a time;
// then one lease's holder writing through all nodes at once, where the
// writes conflict on the lease row: refused/op is the share of writes that
// still failed after Exec's retries (a retryable error, nothing committed).
func BenchmarkGaleraFencedWrite(b *testing.B) {
	b.Run("single-server", func(b *testing.B) {
		benchFencedWrite(b, []string{testdb.MySQLDSN()}, 1)
	})
	dsns := testdb.GaleraDSNs()
	if len(dsns) == 0 {
		b.Skip("SKIP galera benchmarks: set FENCE_TEST_GALERA (clusters/galera/galera.sh)")
	}
	b.Run("galera-one-node", func(b *testing.B) {
		benchFencedWrite(b, dsns[:1], 1)
	})
	b.Run(fmt.Sprintf("single-server-%d-writers", len(dsns)), func(b *testing.B) {
		benchFencedWrite(b, []string{testdb.MySQLDSN()}, len(dsns))
	})
	b.Run(fmt.Sprintf("galera-one-node-%d-writers", len(dsns)), func(b *testing.B) {
		benchFencedWrite(b, dsns[:1], len(dsns))
	})
	b.Run(fmt.Sprintf("galera-%d-nodes-one-lease", len(dsns)), func(b *testing.B) {
		benchFencedWrite(b, dsns, len(dsns))
	})
}

// benchFencedWrite runs b.N fenced writes of one lease, split over writers
// goroutines, writer i through a store on dsns[i%len(dsns)]; each writes its
// own row, so only the lease row is shared.
func benchFencedWrite(b *testing.B, dsns []string, writers int) {
	ctx := context.Background()
	prefix := testdb.Prefix()
	stores := make([]*fence.Store, len(dsns))
	for i, dsn := range dsns {
		stores[i] = openGaleraStore(b, dsn, prefix)
	}
	if _, err := stores[0].Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	target := prefix + "bench"
	b.Cleanup(func() {
		stores[0].DB().ExecContext(context.Background(), "DROP TABLE IF EXISTS "+target)
		stores[0].DropTables(context.Background())
	})
	mustExec(b, stores[0].DB(), "CREATE TABLE "+target+" (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB")
	for w := range writers {
		mustExec(b, stores[0].DB(), "INSERT INTO "+target+" VALUES (?, 0)", w)
	}
	l, err := stores[0].Acquire(ctx, "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	// Every node has the lease and the rows before the clock starts.
	for _, s := range stores {
		for {
			if ok, err := s.IsHeld(ctx, l.Token); err == nil && ok {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	var refused, next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%len(stores)]
			for next.Add(1) <= int64(b.N) {
				_, err := s.Exec(ctx, l.Token, "UPDATE "+target+" SET n = n + 1 WHERE id = ? AND {{fence}}", w)
				if err != nil {
					if !fence.IsRetryable(err) {
						b.Error(err)
						return
					}
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(refused.Load())/float64(b.N), "refused/op")
}
