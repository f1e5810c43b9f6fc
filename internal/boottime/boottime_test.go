package boottime

import (
	"testing"
	"time"
)

func TestNowAdvancesWithRealTime(t *testing.T) {
	a, m := Now(), time.Now()
	time.Sleep(20 * time.Millisecond)
	b, el := Now(), time.Since(m)
	if d := b - a; d < 20*time.Millisecond || d > el+50*time.Millisecond {
		t.Errorf("boot time advanced %v over %v of monotonic time", d, el)
	}
}
