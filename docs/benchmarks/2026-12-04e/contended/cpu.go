//go:build ignore

// cpu.go: client CPU (user + system, the whole process) per acquire and
// release cycle, one goroutine: fence's Store against two prepared UPDATEs
// sent by hand on the Store's handle, three rounds of -n cycles each.
// -prof writes a CPU profile of fence's loop (of the statements by hand with
// RAW=1). Usage: go run docs/benchmarks/2026-12-04e/contended/cpu.go -dsn DSN
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	dsn := flag.String("dsn", "", "")
	n := flag.Int("n", 3000, "")
	prof := flag.String("prof", "", "cpu profile of fence's loop")
	flag.Parse()
	ctx := context.Background()
	s, err := fencedsn.Open(ctx, *dsn, fence.WithPrefix("zzcpu_"))
	check(err)
	_, err = s.Migrate(ctx)
	check(err)
	defer s.DropTables(ctx)
	db := s.DB()
	var lock, unlock *sql.Stmt
	if s.Dialect() == fence.MySQL {
		lock, err = db.Prepare("UPDATE zzcpu_leases SET owner_token = ?, leased_until_ms = 1 WHERE lease_name = ? AND leased_until_ms <= 2")
		check(err)
		unlock, err = db.Prepare("UPDATE zzcpu_leases SET leased_until_ms = 0 WHERE lease_name = ? AND owner_token = ?")
	} else {
		lock, err = db.Prepare("UPDATE zzcpu_leases SET owner_token = $1, leased_until_ms = 1 WHERE lease_name = $2 AND leased_until_ms <= 2")
		check(err)
		unlock, err = db.Prepare("UPDATE zzcpu_leases SET leased_until_ms = 0 WHERE lease_name = $1 AND owner_token = $2")
	}
	check(err)
	l, err := s.Acquire(ctx, "raw", time.Hour)
	check(err)
	check(s.Release(ctx, l.Token))
	if *prof != "" {
		f, err := os.Create(*prof)
		check(err)
		check(pprof.StartCPUProfile(f))
		for i := 0; i < *n*3; i++ {
			if os.Getenv("RAW") != "" {
				_, err := lock.Exec("o", "raw")
				check(err)
				_, err = unlock.Exec("raw", "o")
				check(err)
				continue
			}
			l, err := s.Acquire(ctx, "cyc", time.Hour)
			check(err)
			check(s.Release(ctx, l.Token))
		}
		pprof.StopCPUProfile()
		return
	}
	for round := 0; round < 3; round++ {
		c0, t0 := cpu(), time.Now()
		for i := 0; i < *n; i++ {
			l, err := s.Acquire(ctx, "cyc", time.Hour)
			check(err)
			check(s.Release(ctx, l.Token))
		}
		c1, t1 := cpu(), time.Now()
		for i := 0; i < *n; i++ {
			_, err := lock.Exec("o", "raw")
			check(err)
			_, err = unlock.Exec("raw", "o")
			check(err)
		}
		c2, t2 := cpu(), time.Now()
		fmt.Printf("fence: %v cpu/cycle %v wall/cycle   raw: %v cpu/cycle %v wall/cycle\n",
			(c1-c0)/time.Duration(*n), t1.Sub(t0)/time.Duration(*n), (c2-c1)/time.Duration(*n), t2.Sub(t1)/time.Duration(*n))
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
