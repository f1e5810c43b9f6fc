//go:build ignore

// store.go: the contended scenario through fence's Store (Acquire, then
// Release at once), Workers goroutines on Names names picked at random, on
// one Store, as raw.go does with statements sent by hand. With -raw it
// sends fence's own acquire and release statements by hand on the Store's
// handle instead (MariaDB/MySQL only), which separates fence's Go path from
// the handle it uses. run.sh shows how it is called.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

const (
	nowMs   = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
	floorUs = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
)

func main() {
	dsn := flag.String("dsn", "", "fence DSN")
	workers := flag.Int("workers", 16, "")
	names := flag.Int("names", 1000, "")
	dur := flag.Duration("d", 4*time.Second, "")
	raw := flag.Bool("raw", false, "fence's statements by hand on the Store's handle (MySQL dialect)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the timed part")
	flag.Parse()
	ctx := context.Background()
	s, err := fencedsn.Open(ctx, *dsn, fence.WithPrefix("zzstore_"), fence.WithMaxOpenConns(*workers+2))
	check(err)
	_, err = s.Migrate(ctx)
	check(err)
	defer s.DropTables(ctx)
	for i := 0; i < *names; i++ {
		l, err := s.Acquire(ctx, fmt.Sprintf("n-%d", i), time.Hour)
		check(err)
		check(s.Release(ctx, l.Token))
	}
	var n, refused atomic.Int64
	run := func(owner string) {
		l, err := s.Acquire(ctx, fmt.Sprintf("n-%d", rand.IntN(*names)), time.Hour)
		if errors.Is(err, fence.ErrHeld) {
			refused.Add(1)
			return
		}
		check(err)
		check(s.Release(ctx, l.Token))
		n.Add(1)
	}
	if *raw {
		lock, err := s.DB().Prepare("UPDATE zzstore_leases SET owner_token = ?, holder = ?, " +
			"fence_token = LAST_INSERT_ID(GREATEST(fence_token + 1, " + floorUs + ")), state = 'held', " +
			"acquired_at_ms = " + nowMs + ", updated_at_ms = " + nowMs + ", renew_count = 0, leased_until_ms = " + nowMs + " + ? " +
			"WHERE lease_name = ? AND leased_until_ms <= " + nowMs)
		check(err)
		unlock, err := s.DB().Prepare("UPDATE zzstore_leases SET state = 'released', leased_until_ms = 0, updated_at_ms = " + nowMs +
			" WHERE lease_name = ? AND owner_token = ? AND leased_until_ms > " + nowMs)
		check(err)
		run = func(owner string) {
			name := fmt.Sprintf("n-%d", rand.IntN(*names))
			r, err := lock.Exec(owner, "host:1", 3600000, name)
			check(err)
			if k, _ := r.RowsAffected(); k != 1 {
				refused.Add(1)
				return
			}
			_, err = unlock.Exec(name, owner)
			check(err)
			n.Add(1)
		}
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(*dur)
	for range *workers {
		wg.Go(func() {
			owner := fmt.Sprintf("%032x", rand.Uint64())
			for time.Now().Before(stop) {
				run(owner)
			}
		})
	}
	wg.Wait()
	fmt.Printf("%.0f acquisitions/s, %d refused\n", float64(n.Load())/time.Since(start).Seconds(), refused.Load())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
