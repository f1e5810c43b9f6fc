package fence

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/boottime"
)

// A host suspend stops Go's monotonic clock but not the database's: after
// resuming, the lease may long have lapsed and been taken over while every
// local timer thinks no time passed. The runner counts its renew deadline on
// boot time, so a jump of boot time alone (what a resume looks like) must
// cancel the job at once, long before the next renewal would be refused.
func TestRunnerDeadlineCountsSuspend(t *testing.T) {
	s := migratedSQLite(t)
	var jump atomic.Int64
	restore := boottime.SetForTest(func() time.Duration {
		return time.Duration(time.Now().UnixNano()) + time.Duration(jump.Load())
	})
	defer restore()

	started := make(chan struct{})
	var cancelledAfter time.Duration
	var cause error
	res, err := Run(context.Background(), s, "suspend", func(ctx context.Context) error {
		close(started)
		// The "resume": boot time is 20 s ahead, the monotonic clock is not.
		time.Sleep(100 * time.Millisecond)
		resumed := time.Now()
		jump.Store(int64(20 * time.Second))
		select {
		case <-ctx.Done():
			cancelledAfter, cause = time.Since(resumed), context.Cause(ctx)
		case <-time.After(8 * time.Second):
			cancelledAfter = -1
		}
		return nil
	}, WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if cancelledAfter < 0 {
		t.Fatalf("the job was not cancelled within 8s of a 20s suspend under a 10s TTL: %+v", res)
	}
	if cancelledAfter > 2*time.Second {
		t.Errorf("the job was cancelled %v after the resume; want within about 250ms (the deadline check interval)", cancelledAfter)
	}
	if !errors.Is(cause, ErrUnproven) || res.Outcome != Lost {
		t.Errorf("cause %v, outcome %s: want unproven, lost", cause, res.Outcome)
	}
	// LapseTime is on the same clock: 20 s of suspend put it in the past.
}

func TestLapseTimeCountsSuspend(t *testing.T) {
	s := migratedSQLite(t)
	var jump atomic.Int64
	restore := boottime.SetForTest(func() time.Duration {
		return time.Duration(time.Now().UnixNano()) + time.Duration(jump.Load())
	})
	defer restore()
	_, err := Run(context.Background(), s, "lapse", func(ctx context.Context) error {
		before, ok := LapseTime(ctx)
		if !ok || time.Until(before) < 5*time.Second || time.Until(before) > 10*time.Second {
			t.Errorf("lapse time %v from now, want within the 10s TTL", time.Until(before))
		}
		jump.Store(int64(time.Minute))
		if after, _ := LapseTime(ctx); !after.Before(time.Now()) {
			t.Errorf("after a 1 min suspend the lapse time is still %v ahead", time.Until(after))
		}
		return nil
	}, WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
}
