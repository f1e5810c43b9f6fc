package fence

import (
	"context"
	"fmt"
)

// maxFloor is the largest floor RaiseFences accepts: 2^53 - 1, the largest
// integer a JSON number keeps exactly in JavaScript and other readers that
// decode numbers as float64. Fences from the clock floor stay below it until
// the year 2255.
const maxFloor = 1<<53 - 1

// Raised is what RaiseFences changed.
type Raised struct {
	// Floor is the floor used: every raised lease's fence is now Floor.
	Floor int64
	// Leases are the raised leases as they were before, ordered by name.
	// Each is now revoked.
	Leases []LeaseInfo
}

// RaiseFences is the operator's step after the database went back in time
// (a restore from a backup, or the promotion of an asynchronous replica
// that missed commits): it sets the fence of every lease whose fence is
// below floor to floor and revokes it, in one transaction. floor 0 means
// the database clock in microseconds, the floor every acquisition and
// revoke respects (docs/adr/0004-fence-floor.md); an explicit floor is for
// a clock that cannot be trusted to be ahead of the lost commits, such as
// a restore onto a server whose clock was set back.
//
// The holders of raised leases lose them at once, including any holder
// whose token the restored table shows as valid: after a rollback that
// token may be older than fences handed out and lost. Leases at or above
// floor are left alone. Leases with no row (never acquired before the
// restore point) are not touched; their first acquisition takes the clock
// floor.
func (s *Store) RaiseFences(ctx context.Context, floor int64) (Raised, error) {
	if floor < 0 || floor > maxFloor {
		return Raised{}, fmt.Errorf("%w: floor %d: want 0 (the database clock) or 1..%d (JSON-safe)", ErrInvalid, floor, int64(maxFloor))
	}
	used, rows, err := s.drv.LeaseRaiseFences(ctx, floor)
	if err != nil {
		return Raised{}, s.wrapWrite("raise fences", "", err)
	}
	r := Raised{Floor: used, Leases: make([]LeaseInfo, len(rows))}
	for i, l := range rows {
		r.Leases[i] = info(l.Lease)
		s.log.InfoContext(ctx, "fence: fence raised", "lease", l.Name, "from", l.Fence, "to", l.NewFence)
	}
	return r, nil
}
