package driver

import (
	"context"
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

// AcquireSteps are a driver's statements for Hints.Acquire.
type AcquireSteps struct {
	// Get reads the row: a plain read, no lock, no write.
	Get func(ctx context.Context, name string) (Lease, bool, error)
	// Update takes a lease whose row exists and has lapsed, in one plain
	// UPDATE; done is false when it matched nothing (held, or no row), and
	// then nothing was written.
	Update func(ctx context.Context, p AcquireParams) (r AcquireResult, done bool, err error)
	// Full answers every case in one statement (the upsert, or the
	// statement that reports the holder from its snapshot).
	Full func(ctx context.Context, p AcquireParams) (AcquireResult, error)
}

// Acquire is a driver's LeaseAcquire by the path the caller chose
// (normally h.Path(p.Name)):
//
//   - PathReadFirst: Get refuses a valid lease from the read, with its
//     holder, taking no lock; a lapsed row is taken by Update;
//   - PathUpdate: Update takes it;
//   - PathFull, or a step that did not settle it (no row, or the UPDATE
//     lost a race): Full.
//
// Each path is correct whatever the row holds; a stale hint costs a round
// trip. A failure of the read, sent alone, is marked BeforeWrite: nothing
// was written. The outcome is noted for the next call.
func (h *Hints) Acquire(ctx context.Context, p AcquireParams, path int, s AcquireSteps) (r AcquireResult, err error) {
	done := false
	switch path {
	case PathReadFirst:
		var l Lease
		var ok bool
		if l, ok, err = s.Get(ctx, p.Name); err != nil {
			return r, BeforeWrite(err)
		}
		switch {
		case ok && l.LeasedUntilMs > l.NowMs:
			r, done = AcquireResult{NowMs: l.NowMs, Holder: &l}, true
		case ok:
			r, done, err = s.Update(ctx, p)
		}
	case PathUpdate:
		r, done, err = s.Update(ctx, p)
	}
	if err == nil && !done {
		r, err = s.Full(ctx, p)
	}
	if err == nil {
		h.Note(p.Name, r, p.TTLMs)
	}
	return r, err
}
