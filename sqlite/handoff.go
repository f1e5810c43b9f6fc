package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// Fast handoff within one process: a release (or revoke, or raise) that
// commits through any Driver of this process wakes every AcquireWait of
// this process waiting for that lease on the same database file and table
// prefix, whichever handle each opened, instead of letting them sleep out
// their poll (up to the wait backoff's maximum, 2 s by default). SQLite has
// no notification between processes: a waiter in another process still
// polls, and a lapsed holder is still noticed at the expiry the waiter read.
//
// It is race-free the way the root's handoff requires: the waiter registers
// here before its next attempt, and a release checks for waiters after it
// committed, so either that attempt sees the release or the release sees
// the registration (wakes.n is sequentially consistent) and wakes it.

var wakes = struct {
	// n counts registered waiters: with none, a release pays one atomic
	// load and nothing else.
	n  atomic.Int64
	mu sync.Mutex
	m  map[wakeKey]map[chan struct{}]struct{}
}{m: map[wakeKey]map[chan struct{}]struct{}{}}

// wakeKey is one lease of one database: its file as SQLite names it, or for
// a database in memory (file "", private to its handle) the handle.
type wakeKey struct {
	file   string
	db     *sql.DB
	prefix string
	name   string
}

func (d *Driver) wakeKey(ctx context.Context, name string) (wakeKey, bool) {
	file, err := d.dbFile(ctx)
	if err != nil {
		return wakeKey{}, false
	}
	k := wakeKey{file: file, prefix: d.prefix, name: name}
	if file == "" {
		k.db = d.db
	}
	return k, true
}

// WatchRelease registers interest in releases (and revokes and raises) of
// lease name made by this process until stop is called: wake receives a
// value after every such release that commits from now on. When the
// database's file cannot be read, wake stays silent and the caller's own
// timer applies.
func (d *Driver) WatchRelease(ctx context.Context, name string) (wake <-chan struct{}, stop func()) {
	ch := make(chan struct{}, 1)
	k, ok := d.wakeKey(ctx, name)
	if !ok {
		return ch, func() {}
	}
	wakes.mu.Lock()
	set := wakes.m[k]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		wakes.m[k] = set
	}
	set[ch] = struct{}{}
	wakes.n.Add(1)
	wakes.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			wakes.mu.Lock()
			defer wakes.mu.Unlock()
			delete(set, ch)
			if len(set) == 0 {
				delete(wakes.m, k)
			}
			wakes.n.Add(-1)
		})
	}
}

// released wakes this process's waiters for the named leases, after their
// release committed.
func (d *Driver) released(ctx context.Context, names ...string) {
	if wakes.n.Load() == 0 {
		return
	}
	for _, name := range names {
		k, ok := d.wakeKey(ctx, name)
		if !ok {
			return
		}
		wakes.mu.Lock()
		for ch := range wakes.m[k] {
			select {
			case ch <- struct{}{}:
			default: // already has a wake-up pending
			}
		}
		wakes.mu.Unlock()
	}
}
