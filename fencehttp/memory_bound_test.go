package fencehttp

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/fencekit/fence"
)

// Before: every distinct Fence-Lease value a client sent stayed in the
// map for good (200k names: +16.5 MB at 40-byte names, +43 MB in the
// issue's run). Now the server picks the lease, entries are made only for
// signed fences, and there are at most capacity of them.
func TestMemoryBounded(t *testing.T) {
	t.Parallel() // a while under -race; overlaps the database tests
	const names = 200_000
	// Refused requests take the same path up to the MAC check whatever
	// their number; fewer of them keep the test's time down.
	const forged = 20_000
	// The route picks the lease here, the way a server-side function of the
	// request may; the longest names fence allows make the worst case.
	lease := func(r *http.Request) string { return r.URL.Path[1:] }
	m := newMemory(t, lease, 0)
	h := m.Handler(ok)
	pad := strings.Repeat("x", fence.MaxNameLen-12)
	name := func(i int) string { return fmt.Sprintf("%s%012d", pad, i) }
	run := func(key []byte, n int) (codes map[int]int, growth int64) {
		codes = map[int]int{}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		req, _ := http.NewRequest("POST", "/", nil)
		for i := range n {
			n := name(i)
			req.URL.Path = "/" + n
			req.Header.Set(HeaderFence, sign(t, key, tok(n, 1, ownerA)))
			w := &discardWriter{}
			h.ServeHTTP(w, req)
			if w.code == 0 {
				w.code = http.StatusOK
			}
			codes[w.code]++
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		return codes, int64(after.HeapAlloc) - int64(before.HeapAlloc)
	}

	codes, growth := run(otherKey, forged)
	t.Logf("%d names signed with the wrong key: statuses %v, entries %d, heap %+.2f MB", forged, codes, m.Len(), float64(growth)/1e6)
	if codes[http.StatusForbidden] != forged || m.Len() != 0 {
		t.Fatalf("forged fences: statuses %v, %d entries", codes, m.Len())
	}

	codes, growth = run(testKey, names)
	perEntry := float64(growth) / float64(m.Len())
	t.Logf("%d names signed with the key: statuses %v, entries %d (capacity %d), heap %+.2f MB, %.0f bytes per entry", names, codes, m.Len(), DefaultCapacity, float64(growth)/1e6, perEntry)
	if m.Len() != DefaultCapacity || codes[http.StatusOK] != DefaultCapacity || codes[http.StatusServiceUnavailable] != names-DefaultCapacity {
		t.Fatalf("statuses %v, %d entries", codes, m.Len())
	}
	// The documented cost is about 500 bytes per entry; allow some slack
	// for the runtime, not for growth with the number of names.
	if limit := int64(DefaultCapacity) * 800; growth > limit {
		t.Fatalf("heap grew %d bytes for %d entries, over the %d-byte bound", growth, m.Len(), limit)
	}
	runtime.KeepAlive(m)
}

// discardWriter keeps only the status: a recorder per request would
// dominate the measurement.
type discardWriter struct {
	code int
	h    http.Header
}

func (d *discardWriter) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}
func (d *discardWriter) WriteHeader(c int) { d.code = c }
func (d *discardWriter) Write(p []byte) (int, error) {
	if d.code == 0 {
		d.code = http.StatusOK
	}
	return len(p), nil
}
