package fence

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestScheduleRetention: with WithRetention, Schedule prunes the lease's old
// finished runs after each slot instead of keeping one row per slot forever.
func TestScheduleRetention(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	s := migratedSQLite(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var slots atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- Schedule(ctx, s, "retained", "@every 1s", func(context.Context) error {
			if slots.Add(1) >= 3 {
				cancel()
			}
			return nil
		}, WithTTL(3*time.Second), WithRetention(time.Millisecond))
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Schedule: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Schedule ran fewer than 3 slots in a minute")
	}
	runs, err := s.Runs(context.Background(), RunFilter{Lease: "retained"})
	if err != nil {
		t.Fatal(err)
	}
	// Each slot prunes the runs before it (finished ≥ 1 s earlier); only the
	// last slot's run, and perhaps the one before, can remain.
	if len(runs) > 2 {
		t.Errorf("%d runs kept after %d slots with a 1ms retention", len(runs), slots.Load())
	}
	if err := Schedule(context.Background(), s, "retained", "@every 1s", nil, WithRetention(time.Microsecond)); !errors.Is(err, ErrInvalid) {
		t.Errorf("WithRetention(1µs): %v, want ErrInvalid", err)
	}
}

// Specs: 5 fields, 6 with seconds first, descriptors; CRON_TZ= in the spec
// and WithTimeZone set the zone (the spec's wins); a bad spec says what
// is accepted.
func TestScheduleSpecs(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	from := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC) // 14:00 in Berlin, 21:00 in Tokyo
	for _, tc := range []struct {
		spec string
		loc  *time.Location
		want time.Time
	}{
		{"0 13 * * *", time.UTC, time.Date(2026, 7, 1, 13, 0, 0, 0, time.UTC)},
		{"30 */5 * * * *", time.UTC, time.Date(2026, 7, 1, 12, 0, 30, 0, time.UTC)},
		{"*/10 * * * * *", time.UTC, time.Date(2026, 7, 1, 12, 0, 10, 0, time.UTC)},
		{"0 6 * * *", berlin, time.Date(2026, 7, 2, 4, 0, 0, 0, time.UTC)},
		{"CRON_TZ=Europe/Berlin 0 6 * * *", nil, time.Date(2026, 7, 2, 4, 0, 0, 0, time.UTC)},
		{"CRON_TZ=Europe/Berlin 0 6 * * *", tokyo, time.Date(2026, 7, 2, 4, 0, 0, 0, time.UTC)},
		{"0 6 * * *", tokyo, time.Date(2026, 7, 1, 21, 0, 0, 0, time.UTC)},
		{"@hourly", time.UTC, time.Date(2026, 7, 1, 13, 0, 0, 0, time.UTC)},
	} {
		s, err := parseSpec(tc.spec, tc.loc)
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		if got := s.Next(from); !got.Equal(tc.want) {
			t.Errorf("%q in %v: next after %v is %v, want %v", tc.spec, tc.loc, from, got.UTC(), tc.want)
		}
	}
	// Daylight saving in Berlin, 2026: 02:30 does not exist on 29 March
	// (skipped to the next day) and happens twice on 25 October (both run).
	dst, err := parseSpec("30 2 * * *", berlin)
	if err != nil {
		t.Fatal(err)
	}
	if got := dst.Next(time.Date(2026, 3, 28, 12, 0, 0, 0, berlin)); !got.Equal(time.Date(2026, 3, 30, 0, 30, 0, 0, time.UTC)) {
		t.Errorf("spring forward: next 02:30 is %v", got)
	}
	first := dst.Next(time.Date(2026, 10, 24, 12, 0, 0, 0, berlin))
	if second := dst.Next(first); !first.Equal(time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)) || !second.Equal(time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC)) {
		t.Errorf("fall back: 02:30 at %v then %v, want both instants", first.UTC(), second.UTC())
	}
	for _, bad := range []string{"* * *", "0 0 0 0 0 0 0", "CRON_TZ=Nowhere/Land 0 6 * * *", "@fortnightly"} {
		if _, err := parseSpec(bad, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "6 with seconds first") {
			t.Errorf("%q: %v, want ErrInvalid saying what a spec is", bad, err)
		}
	}
}
