//go:build ignore

// release.go: fence's PostgreSQL release statement in four forms, timed one
// at a time, interleaved with the floor UPDATE, in one process (p50 of
// 1,600 each; run from the repository root):
//
//	rel_old        as in 42fe476: the notification (SELECT 1 FROM pg_notify(...))
//	               and the lapse re-check's read a subquery
//	rel_sub        4ef2166: pg_notify a plain expression, the re-check a subquery
//	rel_fn         as shipped: the re-check calls lease_until (schema version 4)
//	rel_norecheck  rel_fn without the re-check's read (a control; not safe)
//
// Usage: go run docs/benchmarks/2026-12-05/release/release.go [-dsn DSN]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

func main() {
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "")
	flag.Parse()
	ctx := context.Background()
	s, err := fencedsn.Open(ctx, *dsn, fence.WithPrefix("zzrel_"))
	check(err)
	_, err = s.Migrate(ctx)
	check(err)
	db := s.DB()
	_, err = db.Exec("CREATE TABLE zzrel_floor (id int primary key, n bigint not null)")
	check(err)
	_, err = db.Exec("INSERT INTO zzrel_floor VALUES (1, 0)")
	check(err)
	defer func() {
		db.Exec("DROP TABLE zzrel_floor")
		s.DropTables(ctx)
	}()

	now := "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint"
	clk := "(floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint"
	floorUs := "(floor(extract(epoch FROM statement_timestamp()) * 1000000))::bigint"
	oldNotify := "CASE WHEN pg_try_advisory_xact_lock(hashtext('zzrel_release'), hashtext(l.lease_name)) THEN 0 ELSE (SELECT 1 FROM pg_notify('zzrel_release', l.lease_name)) END"
	newNotify := "CASE WHEN pg_try_advisory_xact_lock(hashtext('zzrel_release'), hashtext(l.lease_name)) THEN 0 ELSE length(pg_notify('zzrel_release', l.lease_name)::text) END"
	read := func(path, notify string) string {
		b, err := os.ReadFile(path)
		check(err)
		return strings.NewReplacer("{{prefix}}", "zzrel_", "{{stmt_now_ms}}", now, "{{now_ms}}", clk,
			"{{stmt_floor_us}}", floorUs, "{{notify}}", notify).Replace(string(b))
	}
	acquire := read("postgres/queries/lease_acquire_update.sql", "")
	fn := "zzrel_lease_until($1::text)"
	sub := "(SELECT s.leased_until_ms FROM zzrel_leases AS s WHERE s.lease_name = $1::text)"
	shipped := read("postgres/queries/lease_release.sql", newNotify)
	if !strings.Contains(shipped, fn) {
		check(fmt.Errorf("lease_release.sql no longer has the re-check %s", fn))
	}
	forms := map[string]string{
		"rel_old":       strings.Replace(read("postgres/queries/lease_release.sql", oldNotify), fn, sub, 1),
		"rel_sub":       strings.Replace(shipped, fn, sub, 1),
		"rel_fn":        shipped,
		"rel_norecheck": strings.Replace(shipped, fn, "9223372036854775807", 1),
	}
	names := []string{"rel_old", "rel_sub", "rel_fn", "rel_norecheck"}

	l, err := s.Acquire(ctx, "r", time.Hour) // the row
	check(err)
	check(s.Release(ctx, l.Token))
	owner := "0123456789abcdef0123456789abcdef"
	times := map[string][]float64{}
	for i := 0; i < 8000; i++ {
		if i%5 == 4 {
			t0 := time.Now()
			_, err := db.ExecContext(ctx, "UPDATE zzrel_floor SET n = n + 1 WHERE id = $1", 1)
			check(err)
			times["floor"] = append(times["floor"], us(t0))
			continue
		}
		n := names[i%5]
		var fence, until, at, x, y int64
		check(db.QueryRowContext(ctx, acquire, "r", owner, int64(3600000), "h").Scan(&fence, &until, &at))
		t0 := time.Now()
		check(db.QueryRowContext(ctx, forms[n], "r", owner, fence).Scan(&x, &y))
		times[n] = append(times[n], us(t0))
	}
	for _, n := range append([]string{"floor"}, names...) {
		x := times[n]
		sort.Float64s(x)
		fmt.Printf("%-14s p50 %6.1f µs  p25 %6.1f  p75 %6.1f\n", n, x[len(x)/2], x[len(x)/4], x[len(x)*3/4])
	}
}

func us(t0 time.Time) float64 { return float64(time.Since(t0).Nanoseconds()) / 1e3 }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
