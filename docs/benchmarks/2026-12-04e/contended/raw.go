//go:build ignore

// raw.go: contended throughput of a lock statement and an unlock statement
// sent by hand (prepared, autocommit), Workers goroutines on Names names
// picked at random: a lock that changed one row counts as an acquisition
// and is unlocked at once. No fence code runs; it tells what the table and
// the statements cost from what fence's Go path costs (store.go). run.sh
// shows how it is called.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
)

func main() {
	drv := flag.String("driver", "pgx", "pgx or mysql")
	dsn := flag.String("dsn", "", "")
	setup := flag.String("setup", "", "setup SQL file (statements split on ;\\n)")
	lock := flag.String("lock", "", "lock SQL ($1/? name, $2/? owner)")
	unlock := flag.String("unlock", "", "unlock SQL ($1 name, $2 owner)")
	workers := flag.Int("workers", 16, "")
	names := flag.Int("names", 1000, "")
	dur := flag.Duration("d", 3*time.Second, "")
	ownerFirst := flag.Bool("ownerfirst", false, "lock takes (owner, name)")
	flag.Parse()
	db, err := sql.Open(*drv, *dsn)
	check(err)
	db.SetMaxOpenConns(*workers + 2)
	db.SetMaxIdleConns(*workers + 2)
	ctx := context.Background()
	if *setup != "" {
		b, err := os.ReadFile(*setup)
		check(err)
		for _, q := range strings.Split(string(b), ";\n") {
			if strings.TrimSpace(q) == "" {
				continue
			}
			_, err := db.ExecContext(ctx, q)
			check(err)
		}
	}
	ls, err := db.PrepareContext(ctx, *lock)
	check(err)
	us, err := db.PrepareContext(ctx, *unlock)
	check(err)
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(*dur)
	start := time.Now()
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("%032x", rand.Uint64())
			for time.Now().Before(stop) {
				name := fmt.Sprintf("n-%d", rand.IntN(*names))
				args := []any{name, owner}
				if *ownerFirst {
					args = []any{owner, name}
				}
				r, err := ls.ExecContext(ctx, args...)
				check(err)
				if k, _ := r.RowsAffected(); k == 1 {
					_, err := us.ExecContext(ctx, name, owner)
					check(err)
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%.0f\n", float64(n.Load())/time.Since(start).Seconds())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
