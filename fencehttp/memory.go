package fencehttp

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/fencekit/fence"
)

// DefaultCapacity is the number of leases a Memory made with capacity 0
// remembers: about 5 MB at the longest lease names (see Memory).
const DefaultCapacity = 10_000

// Memory is an in-process checker: it remembers the highest fence seen per
// lease and holds a per-lease lock from the check until the handler
// returns, so within this process a request with a lower fence never runs
// after one with a higher fence has started, and two requests of one lease
// never run at once.
//
// What it does not protect:
//   - an effect that outlives the handler (a goroutine it started, a queued
//     write, a call to a third system that lands later);
//   - other processes: replicas behind a load balancer each have their own
//     memory, and a restart forgets every fence. Use Guard when the effect
//     is a database write, or when more than one process serves the lease.
//
// A stalled handler blocks the lease's later requests until it returns;
// they give up with 503 when their request context ends.
//
// Memory never forgets a fence, since forgetting would let a stale holder
// in again; when it holds capacity leases it refuses requests for new ones
// with 503 (ErrFull). An entry costs about 500 bytes at the longest lease
// name (fence.MaxNameLen), measured by TestMemoryBounded. Entries are made
// only after the signature is verified, so a client without the key cannot
// fill it.
type Memory struct {
	v   *Verifier
	cap int

	mu     sync.Mutex
	leases map[string]*leaseSlot

	beforeWait func(Claim) // test hook: a request is about to wait for its turn
}

type leaseSlot struct {
	turn    chan struct{} // holds one token while a request of the lease runs
	highest int64         // guarded by turn
	owner   string        // owner id of highest
}

// NewMemory returns a Memory that checks requests with v and remembers up
// to capacity leases (DefaultCapacity if 0).
func NewMemory(v *Verifier, capacity int) (*Memory, error) {
	if v == nil {
		return nil, fmt.Errorf("%w: fencehttp: NewMemory needs a Verifier", fence.ErrInvalid)
	}
	if capacity < 0 {
		return nil, fmt.Errorf("%w: fencehttp: capacity %d is negative", fence.ErrInvalid, capacity)
	}
	if capacity == 0 {
		capacity = DefaultCapacity
	}
	return &Memory{v: v, cap: capacity, leases: map[string]*leaseSlot{}}, nil
}

// Len returns the number of leases remembered.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.leases)
}

func (m *Memory) slot(lease string) (*leaseSlot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.leases[lease]
	if s == nil {
		if len(m.leases) >= m.cap {
			return nil, fmt.Errorf("%w: it remembers %d leases, its capacity; lease %q is new (raise the capacity, or use Guard)", ErrFull, m.cap, lease)
		}
		s = &leaseSlot{turn: make(chan struct{}, 1)}
		m.leases[lease] = s
	}
	return s, nil
}

// Handler returns next behind the check: 428 without a Fence-Token, 400
// for a malformed one, 403 for a bad signature, 412 for a fence below the
// highest seen (or equal to it but signed for another owner), 503 when full
// or when the wait for the lease's running request ends with the request.
// next can read the claim with ClaimFrom.
func (m *Memory) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := m.v.Verify(r)
		if err != nil {
			refuse(w, err)
			return
		}
		s, err := m.slot(c.Lease)
		if err != nil {
			refuse(w, err)
			return
		}
		if m.beforeWait != nil {
			m.beforeWait(c)
		}
		select {
		case s.turn <- struct{}{}:
		case <-r.Context().Done():
			refuse(w, fmt.Errorf("fencehttp: lease %q fence %d: gave up waiting for the lease's running request: %w", c.Lease, c.Fence, r.Context().Err()))
			return
		}
		defer func() { <-s.turn }()
		if c.Fence < s.highest || c.Fence == s.highest && c.Owner != s.owner {
			refuse(w, fmt.Errorf("%w: fencehttp: lease %q fence %d (owner id %s) is stale: this server has seen fence %d (owner id %s)", fence.ErrStale, c.Lease, c.Fence, c.Owner, s.highest, s.owner))
			return
		}
		s.highest, s.owner = c.Fence, c.Owner
		next.ServeHTTP(w, withClaim(r, c))
	})
}
