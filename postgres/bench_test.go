package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// go test -run '^$' -bench . ./postgres/
//
// The lease operations run over database/sql (pgx's stdlib adapter) and over
// a pgxpool.Pool as sub-benchmarks, so one run gives the ratio between the
// two handles.

func eachHandle(b *testing.B, f func(b *testing.B, d *Driver)) {
	b.Run("stdlib", func(b *testing.B) { f(b, newDriver(b)) })
	b.Run("pgxpool", func(b *testing.B) { f(b, newPoolDriver(b)) })
}

func BenchmarkAcquireRelease(b *testing.B) {
	eachHandle(b, func(b *testing.B, d *Driver) {
		ctx := context.Background()
		o := owner(b)
		for b.Loop() {
			r, err := d.LeaseAcquire(ctx, driver.AcquireParams{Name: "job", Owner: o, TTLMs: 60_000})
			if err != nil || !r.Acquired {
				b.Fatal(r, err)
			}
			if ok, err := d.LeaseRelease(ctx, tokenParams("job", o, r.Fence)); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
}

func BenchmarkRenew(b *testing.B) {
	eachHandle(b, func(b *testing.B, d *Driver) {
		tok := acquire(b, d, "job", time.Hour)
		ctx := context.Background()
		for b.Loop() {
			if r, err := d.LeaseRenew(ctx, tok, 3_600_000); err != nil || !r.Renewed {
				b.Fatal(r, err)
			}
		}
	})
}

func BenchmarkIsHeld(b *testing.B) {
	eachHandle(b, func(b *testing.B, d *Driver) {
		tok := acquire(b, d, "job", time.Hour)
		ctx := context.Background()
		for b.Loop() {
			if ok, err := d.LeaseIsHeld(ctx, tok); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
}

func BenchmarkAcquireRefused(b *testing.B) {
	eachHandle(b, func(b *testing.B, d *Driver) {
		acquire(b, d, "job", time.Hour)
		ctx := context.Background()
		p := driver.AcquireParams{Name: "job", Owner: owner(b), TTLMs: 1000}
		for b.Loop() {
			if r, err := d.LeaseAcquire(ctx, p); err != nil || r.Acquired {
				b.Fatal(r, err)
			}
		}
	})
}

func BenchmarkGuardedUpdate(b *testing.B) {
	d := newDriver(b)
	d.execT(b, `CREATE TABLE {{prefix}}jobs (id int PRIMARY KEY, n bigint NOT NULL)`)
	b.Cleanup(func() { d.db.Exec("DROP TABLE IF EXISTS " + d.prefix + "jobs") })
	d.execT(b, `INSERT INTO {{prefix}}jobs VALUES (1, 0)`)
	tok := acquire(b, d, "job", time.Hour)
	pred, args := d.GuardSQL(tok, 2)
	q := "UPDATE " + d.prefix + "jobs SET n = n + 1 WHERE id = $1 AND " + pred
	ctx := context.Background()
	for b.Loop() {
		if _, err := d.db.ExecContext(ctx, q, append([]any{1}, args...)...); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenewBatch(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			d := newDriver(b)
			d.execT(b, `INSERT INTO {{prefix}}leases (lease_name, owner_token, fence_token, state, leased_until_ms, acquired_at_ms, updated_at_ms)
				SELECT 'lease-' || i, 'owner-' || i, 1, 'held', {{now_ms}} + 3600000, 0, 0 FROM generate_series(1, $1::int) AS i`, n)
			ts := make([]driver.TokenParams, n)
			for i := range ts {
				ts[i] = tokenParams(fmt.Sprintf("lease-%d", i+1), fmt.Sprintf("owner-%d", i+1), 1)
			}
			ctx := context.Background()
			for b.Loop() {
				rs, err := d.LeaseRenewBatch(ctx, ts, 3_600_000)
				if err != nil || len(rs) != n || !rs[n-1].Renewed {
					b.Fatal(len(rs), err)
				}
			}
		})
	}
}
