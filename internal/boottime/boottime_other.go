//go:build !linux

package boottime

import "time"

var start = time.Now()

func now() time.Duration { return time.Since(start) }
