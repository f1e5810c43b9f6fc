package mysql

import (
	"context"
	"sync"
	"time"
)

// How often a watch reads a watched lease's row: watchMin at first, then
// each interval watchGrow times the last, up to watchMax. A waiter therefore
// learns of a release within watchMax (50 ms) plus a round trip, and a long
// wait costs one primary-key read per watchMax per watched name and process
// (shared by every waiter of that name in the process), not one per waiter.
//
// MySQL and MariaDB have no LISTEN/NOTIFY. The other way to be told, a
// waiter blocked in GET_LOCK on a named lock the holder keeps, would need the
// holder to keep a connection per held lease for the lease's whole life,
// and every holder to be this version: not done (measured in
// docs/benchmarks/2026-12-04b/mariadb.md, in git at 0c87e8d; docs/BENCHMARKS.md, History).
const (
	watchMin  = 10 * time.Millisecond
	watchMax  = 50 * time.Millisecond
	watchGrow = 1.25
	// watchRead bounds one poll's read.
	watchRead = 2 * time.Second
)

// watches is the Driver's set of polled names (the zero value is ready).
type watches struct {
	mu    sync.Mutex
	names map[string]*watch
}

// watch is one name's poller and the channels of its waiters.
type watch struct {
	chans map[chan struct{}]struct{}
	stop  context.CancelFunc
}

// WatchRelease tells AcquireWait (the root package's releaseWatcher) when
// the lease stops being valid: released, revoked or lapsed. A poller per
// name reads the row (lease_get.sql, a plain read that takes no lock) and
// wakes every waiter once each time it sees the lease go from valid to not
// valid; the first read counts as a change when it finds the lease already
// free, since the caller's refused attempt saw it held. Read errors are
// ignored: the waiter's own timer still applies. stop ends the caller's
// watch; the poller ends with the last one.
func (d *Driver) WatchRelease(ctx context.Context, name string) (wake <-chan struct{}, stop func()) {
	ch := make(chan struct{}, 1)
	w := &d.watches
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names == nil {
		w.names = map[string]*watch{}
	}
	x := w.names[name]
	if x == nil {
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		x = &watch{chans: map[chan struct{}]struct{}{}, stop: cancel}
		w.names[name] = x
		go d.poll(pctx, name, x)
	}
	x.chans[ch] = struct{}{}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			delete(x.chans, ch)
			if len(x.chans) == 0 {
				x.stop()
				if w.names[name] == x {
					delete(w.names, name)
				}
			}
		})
	}
}

func (d *Driver) poll(ctx context.Context, name string, x *watch) {
	valid := true // the caller was refused: held when the watch began
	every := watchMin
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, watchRead)
		l, ok, err := d.LeaseGet(rctx, name)
		cancel()
		if err == nil {
			now := ok && l.LeasedUntilMs > l.NowMs
			if valid && !now {
				d.watches.mu.Lock()
				for ch := range x.chans {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
				d.watches.mu.Unlock()
			}
			valid = now
		}
		every = min(time.Duration(float64(every)*watchGrow), watchMax)
		t.Reset(every)
	}
}
