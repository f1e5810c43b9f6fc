package torture

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The restart fault must fire in every run long enough to hold one, for
// every seed: the coin it replaced left whole CI runs without a restart.
func TestRestartScheduleFiresForEverySeed(t *testing.T) {
	for seed := uint64(0); seed < 2000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1<<32))
		var r restartSchedule
		var at []time.Duration
		var clock time.Duration
		for clock < 60*time.Second {
			tick := time.Duration(100+rng.IntN(400)) * time.Millisecond
			clock += tick
			if r.advance(rng, tick) {
				at = append(at, clock)
			}
		}
		if len(at) == 0 || at[0] > 5500*time.Millisecond {
			t.Fatalf("seed %d: first restart at %v (all: %v), want within 5.5 s", seed, at, at)
		}
		// 60 s holds at least 7 restarts 8.5 s apart and at most 15 4 s apart.
		if len(at) < 7 || len(at) > 15 {
			t.Fatalf("seed %d: %d restarts in 60 s: %v", seed, len(at), at)
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap < 4*time.Second || gap > 8500*time.Millisecond {
				t.Fatalf("seed %d: restarts %v apart (%v)", seed, gap, at)
			}
		}
	}
}

func TestRestartScheduleDependsOnSeed(t *testing.T) {
	first := func(seed uint64) time.Duration {
		rng := rand.New(rand.NewPCG(seed, 1<<32))
		var r restartSchedule
		var clock time.Duration
		for !r.advance(rng, 100*time.Millisecond) {
			clock += 100 * time.Millisecond
		}
		return clock
	}
	seen := map[time.Duration]bool{}
	for seed := uint64(0); seed < 50; seed++ {
		seen[first(seed)] = true
	}
	if len(seen) < 5 {
		t.Fatalf("the first restart falls at only %d distinct times over 50 seeds: %v", len(seen), seen)
	}
}
