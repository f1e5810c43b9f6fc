package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// The same lease operations over database/sql (pgx's stdlib adapter) and over
// a pgxpool.Pool, so one run gives the ratio between the two handles:
//
//	go test -run '^$' -bench 'Handle' -count 5 ./postgres/

func eachHandle(b *testing.B, f func(b *testing.B, d *Driver)) {
	b.Run("stdlib", func(b *testing.B) { f(b, newDriver(b)) })
	b.Run("pgxpool", func(b *testing.B) { f(b, newPoolDriver(b)) })
}

func BenchmarkHandleAcquireRelease(b *testing.B) {
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

func BenchmarkHandleRenew(b *testing.B) {
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

func BenchmarkHandleIsHeld(b *testing.B) {
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

func BenchmarkHandleAcquireRefused(b *testing.B) {
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
