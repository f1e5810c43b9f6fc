package mysql

import (
	"sync"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// maxHints bounds heldHints: past it the map is emptied, which only sends
// the next acquire of each name down the upsert path once.
const maxHints = 4096

// contendedFor is how long a name another owner was seen holding is read
// first: until this process sees it free (its read finds it lapsed and its
// UPDATE takes it, or it releases it), at most this long. Not the holder's
// reported expiry: a holder that renews keeps the lease past it, and a
// process refused once (a waiter, a periodic job that lost the election) is
// refused again more often than not, where the read costs one lock-free
// round trip and the UPDATE-then-upsert two with locks. On a free lease the
// read costs one round trip more than the UPDATE alone, once.
const contendedFor = 24 * time.Hour

// The first statement LeaseAcquire sends for a name.
const (
	pathUpsert    = iota // a name this process knows nothing of: the upsert answers every case
	pathUpdate           // the row exists and is not known held: one plain UPDATE takes it
	pathReadFirst        // known held: a plain read refuses without a lock
)

// heldHints remembers, per lease name, what this process last learnt of its
// row: that it exists (it acquired, released, revoked or was refused the
// lease) and until when it is taken to be held (an acquisition it made:
// until its TTL ends; a refusal it saw: contendedFor, unless it sees the
// lease free first). It only chooses which of LeaseAcquire's statements
// goes first; each is correct whatever the row holds, so a stale hint costs
// a round trip, never a wrong answer. The deadline is on the local monotonic clock.
// The zero value is ready to use.
type heldHints struct {
	mu sync.Mutex
	m  map[string]time.Time // the zero Time: exists, not known held
	// force, set by tests only before use, overrides path: pathX + 1.
	force int
}

// path returns the first statement for name.
func (h *heldHints) path(name string) int {
	if h.force != 0 {
		return h.force - 1
	}
	h.mu.Lock()
	until, ok := h.m[name]
	h.mu.Unlock()
	switch {
	case !ok:
		return pathUpsert
	case time.Now().Before(until):
		return pathReadFirst
	default:
		return pathUpdate
	}
}

// note records an acquire's outcome: held for ttlMs when it was acquired,
// contendedFor when it was refused by a valid holder.
func (h *heldHints) note(name string, r driver.AcquireResult, ttlMs int64) {
	var until time.Time
	switch {
	case r.Acquired:
		until = time.Now().Add(time.Duration(ttlMs) * time.Millisecond)
	case r.Holder != nil && r.Holder.LeasedUntilMs > r.Holder.NowMs:
		until = time.Now().Add(contendedFor)
	case r.Holder != nil:
	default:
		return
	}
	h.set(name, until)
}

// free records that this process released or revoked name: the row exists
// and is not held.
func (h *heldHints) free(name string) { h.set(name, time.Time{}) }

func (h *heldHints) set(name string, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHints {
		h.m = make(map[string]time.Time)
	}
	h.m[name] = until
}
