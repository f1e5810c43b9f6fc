package mysql

import (
	"sync"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// maxHints bounds heldHints: past it the map is emptied, which only sends
// the next acquire of each name down the upsert path once.
const maxHints = 4096

// hintLinger is how long past a refusal's reported expiry the name is still
// read first: a holder that renews keeps its lease past that expiry, and a
// waiter (AcquireWait) retries right at it.
const hintLinger = 10 * time.Second

// heldHints remembers, per lease name, until when this process last knew
// the lease to be held: by an acquisition it made (until its TTL ends) or a
// refusal it saw (until the expiry the database reported). LeaseAcquire
// reads such a lease before it writes (acquireReadFirst). The deadline is
// on the local monotonic clock and is never used to decide anything about
// the lease itself, only which of two correct statements to send first.
// The zero value is ready to use.
type heldHints struct {
	mu sync.Mutex
	m  map[string]time.Time
	// force, set by tests only before use, overrides held: 1 always, -1
	// never.
	force int
}

// held reports whether name was known to be held until a time not yet past.
func (h *heldHints) held(name string) bool {
	if h.force != 0 {
		return h.force > 0
	}
	h.mu.Lock()
	until, ok := h.m[name]
	h.mu.Unlock()
	return ok && time.Now().Before(until)
}

// note records an acquire's outcome: held for ttlMs when it was acquired,
// until hintLinger past the holder's expiry when it was refused with the
// holder known.
func (h *heldHints) note(name string, r driver.AcquireResult, ttlMs int64) {
	var until time.Time
	switch {
	case r.Acquired:
		until = time.Now().Add(time.Duration(ttlMs) * time.Millisecond)
	case r.Holder != nil && r.Holder.LeasedUntilMs > r.Holder.NowMs:
		until = time.Now().Add(time.Duration(r.Holder.LeasedUntilMs-r.Holder.NowMs)*time.Millisecond + hintLinger)
	default:
		h.forget(name)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHints {
		h.m = make(map[string]time.Time)
	}
	h.m[name] = until
}

// forget drops name, after a release or revoke by this process.
func (h *heldHints) forget(name string) {
	h.mu.Lock()
	delete(h.m, name)
	h.mu.Unlock()
}
