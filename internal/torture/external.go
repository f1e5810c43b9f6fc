package torture

import (
	"fmt"
	"sync"
)

// extResource is a resource outside the database, one per lease: a
// downstream service the clients present their tokens to. It sees every
// token a client was handed (an acquire that succeeded) and every token a
// client wrote with (a fenced write that committed), in real time, and it
// outlives anything that happens to the database, rollbacks included.
//
// It checks the external-checker invariant: one fence value is never carried
// by two different owners. Fences that repeat make every downstream check
// that compares fences (ExecResource, an HTTP service keeping the highest
// fence) unable to tell a stale owner from the current one.
//
// It also behaves like ExecResource: it keeps the highest fence written and
// refuses a write with a lower one. The database may accept such a write
// after a rollback (the restored table made an old token valid again); the
// counts show how often the downstream check refused what the database let
// through. A write at the highest fence by another owner is the harm a
// repeated fence does: the resource cannot refuse it, and it is reported as
// a violation of the invariant above.
type extResource struct {
	mu       sync.Mutex
	owners   map[int64]string // fence → the owner first seen with it
	max      int64
	accepted int64
	refused  int64
	reported int
}

func newExtResource() *extResource { return &extResource{owners: map[int64]string{}} }

// see records a token; it returns a description of the violation if its
// fence was seen before with another owner.
func (r *extResource) see(fence int64, owner, how string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seeLocked(fence, owner, how)
}

func (r *extResource) seeLocked(fence int64, owner, how string) string {
	prev, ok := r.owners[fence]
	if !ok {
		r.owners[fence] = owner
		return ""
	}
	if prev == owner || r.reported >= 20 {
		return ""
	}
	r.reported++
	return fmt.Sprintf("fence %d %s by owner %.8s… was already carried by owner %.8s…", fence, how, owner, prev)
}

// write is a write to the resource with a token that committed in the
// database: refused below the highest fence written, else accepted.
func (r *extResource) write(fence int64, owner string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.seeLocked(fence, owner, "written")
	if fence < r.max {
		r.refused++
		return v
	}
	r.max = fence
	r.accepted++
	return v
}
