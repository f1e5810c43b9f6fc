package driver

import (
	"sync"
	"time"
)

// maxHints bounds Hints: past it the map is emptied, which only sends the
// next acquire of each name down the full path once.
const maxHints = 4096

// ContendedFor is how long a name another owner was seen holding is read
// first: until this process sees it free (its read finds it lapsed and its
// UPDATE takes it, or it releases it), at most this long. Not the holder's
// reported expiry: a holder that renews keeps the lease past it, and a
// process refused once (a waiter, a periodic job that lost the election) is
// refused again more often than not, where the read costs one lock-free
// round trip and the UPDATE-then-full-statement two. On a free lease the
// read costs one round trip more than the UPDATE alone, once.
const ContendedFor = 24 * time.Hour

// The first statement a driver's LeaseAcquire sends for a name.
const (
	PathFull      = iota // a name this process knows nothing of: the statement that answers every case
	PathUpdate           // the row exists and is not known held: one plain UPDATE takes it
	PathReadFirst        // known held: a plain read refuses without a lock
)

// Hints remembers, per lease name, what this process last learnt of its
// row: that it exists (it acquired, released, revoked or was refused the
// lease) and until when it is taken to be held (an acquisition it made:
// until its TTL ends; a refusal it saw: ContendedFor, unless it sees the
// lease free first). It only chooses which of LeaseAcquire's statements
// goes first; each is correct whatever the row holds, so a stale hint costs
// a round trip, never a wrong answer. Deadlines are on the local monotonic
// clock. The zero value is ready to use.
type Hints struct {
	mu sync.Mutex
	m  map[string]time.Time // the zero Time: exists, not known held
	// Force, set by tests only before use, overrides Path: PathX + 1 (a
	// value outside the paths means the full statement).
	Force int
}

// Path returns the first statement for name.
func (h *Hints) Path(name string) int {
	if h.Force != 0 {
		if p := h.Force - 1; p >= PathFull && p <= PathReadFirst {
			return p
		}
		return PathFull
	}
	h.mu.Lock()
	until, ok := h.m[name]
	h.mu.Unlock()
	switch {
	case !ok:
		return PathFull
	case time.Now().Before(until):
		return PathReadFirst
	default:
		return PathUpdate
	}
}

// Note records an acquire's outcome: held for ttlMs when it was acquired,
// ContendedFor when it was refused by a valid holder, exists when the row
// was seen lapsed.
func (h *Hints) Note(name string, r AcquireResult, ttlMs int64) {
	var until time.Time
	switch {
	case r.Acquired:
		until = time.Now().Add(time.Duration(ttlMs) * time.Millisecond)
	case r.Holder != nil && r.Holder.LeasedUntilMs > r.Holder.NowMs:
		until = time.Now().Add(ContendedFor)
	case r.Holder != nil:
	default:
		return
	}
	h.set(name, until)
}

// Free records that this process released or revoked name: the row exists
// and is not held.
func (h *Hints) Free(name string) { h.set(name, time.Time{}) }

func (h *Hints) set(name string, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHints {
		h.m = make(map[string]time.Time)
	}
	h.m[name] = until
}
