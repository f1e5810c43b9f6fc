// Package boottime reads the local clock that fence measures lease deadlines
// on: one that keeps counting while the host is suspended. Go's monotonic
// clock (CLOCK_MONOTONIC on Linux) stops during a suspend, so a deadline
// measured on it would be passed, by the database's clock, long before the
// process noticed.
package boottime

import (
	"sync/atomic"
	"time"
)

// Now returns the time since boot (CLOCK_BOOTTIME on Linux; elsewhere Go's
// monotonic clock, which may not count a suspend). Only differences between
// two readings mean anything, also between two processes on one host.
func Now() time.Duration {
	if f := override.Load(); f != nil {
		return (*f)()
	}
	return now()
}

// override replaces the clock in tests, to simulate a suspend.
var override atomic.Pointer[func() time.Duration]

// SetForTest makes Now return f() until restore is called: tests simulate a
// host suspend with it (boot time jumps ahead, Go's monotonic clock does
// not).
func SetForTest(f func() time.Duration) (restore func()) {
	override.Store(&f)
	return func() { override.Store(nil) }
}
