package fence

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Sentinel errors. Every error fence returns about a lease wraps one of these,
// so errors.Is answers the behavioural question and errors.As gives the data.
var (
	// ErrHeld: the lease is validly held by another owner. *HeldError says by
	// which fence and for how long.
	ErrHeld = errors.New("fence: lease is held by another owner")

	// ErrLost: this token no longer has authority. *LostError says why when
	// the database can tell. It is an answer, never a transient failure:
	// retrying the same token cannot succeed.
	ErrLost = errors.New("fence: lease lost")

	// ErrNoMatch: a fenced write affected no rows although the token was still
	// valid when fence looked: the write's own condition matched nothing.
	ErrNoMatch = errors.New("fence: fenced write matched no rows; the lease is still held")

	// ErrNotFound: no lease or run by that name or id.
	ErrNotFound = errors.New("fence: not found")

	// ErrAmbiguous: the connection failed while a write was in flight, so it
	// may or may not have committed. Find out (Get, IsHeld) before acting.
	// It is only returned when the statement may have reached the server: a
	// call whose context had already ended (the error then wraps the
	// context's cause), a connection that never opened, and a statement or
	// arguments the server or the client refused are definite failures.
	ErrAmbiguous = errors.New("fence: outcome unknown")

	// ErrUnavailable: the database could not be reached.
	ErrUnavailable = errors.New("fence: database unavailable")
)

// HeldError is returned by Acquire when someone else holds the lease.
type HeldError struct {
	Lease string
	Fence int64 // the holder's fence; 0 when the holder could not be read
	// Holder is the holder's name (WithHolder; by default host:pid), "" when
	// the holder could not be read or acquired before schema v3. It is what
	// the holder calls itself, not a proof: the owner token is.
	Holder    string
	Remaining time.Duration // until the holder's lease lapses, by the database clock
	// The holder's owner token is not here: it is the holder's credential
	// (with the fence it makes the holder's Token), and a refused caller
	// has no use for it.
}

// Error says who holds the lease and for how long, for example
//
//	fence: lease "admin:reconciliation" is held by "web-3:4121" (fence 8) for another 12.5s
//
// It never contains the holder's owner token.
func (e *HeldError) Error() string {
	if e.Fence == 0 {
		return fmt.Sprintf("fence: lease %q is held by another owner", e.Lease)
	}
	return fmt.Sprintf("fence: lease %q is held by %s (fence %d) for another %v",
		e.Lease, holderText(e.Holder), e.Fence, e.Remaining.Round(time.Millisecond))
}

// holderText is a holder name for a message: quoted (so that any control
// character a row written outside fence carries is escaped), or "an unnamed
// holder" for a row without one.
func holderText(h string) string {
	if h == "" {
		return "an unnamed holder"
	}
	return strconv.Quote(h)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// LostReason says why a token lost its authority.
type LostReason string

const (
	// LostExpired: the lease lapsed by the database clock and nobody has taken it yet.
	LostExpired LostReason = "expired"
	// LostReleased: this token released the lease.
	LostReleased LostReason = "released"
	// LostRevoked: an operator revoked the lease (Revoke, fence revoke).
	LostRevoked LostReason = "revoked"
	// LostSuperseded: a newer acquisition took over.
	LostSuperseded LostReason = "superseded"
	// LostMissing: the lease row is gone (deleted outside fence).
	LostMissing LostReason = "missing"
	// LostUnknown: the database said no but the reason could not be read.
	LostUnknown LostReason = "unknown"
)

// LostError is returned when a token was refused because it no longer holds
// the lease.
type LostError struct {
	Lease   string
	Fence   int64 // the fence the caller held
	Current int64 // the lease's fence now, when known
	Reason  LostReason
	// Op is what was refused: "renew", "release", "write", "finish", ….
	Op string
}

func (e *LostError) Error() string {
	var what string
	switch e.Reason {
	case LostSuperseded:
		what = fmt.Sprintf("fence %d superseded by fence %d", e.Fence, e.Current)
	case LostRevoked:
		what = fmt.Sprintf("fence %d revoked (fence is now %d)", e.Fence, e.Current)
	case LostExpired:
		what = fmt.Sprintf("fence %d expired by the database clock", e.Fence)
	case LostReleased:
		what = fmt.Sprintf("fence %d was released", e.Fence)
	case LostMissing:
		what = fmt.Sprintf("fence %d: the lease row no longer exists", e.Fence)
	default:
		what = fmt.Sprintf("fence %d no longer holds the lease", e.Fence)
	}
	msg := fmt.Sprintf("fence: lease %q %s", e.Lease, what)
	if e.Op != "" {
		msg += "; " + e.Op + " refused"
	}
	return msg
}

// Is makes errors.Is(err, ErrLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// AmbiguousError wraps the error of a write whose outcome is unknown.
type AmbiguousError struct {
	Op    string
	Lease string
	Err   error
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("fence: %s of lease %q: outcome unknown, the write may or may not have committed: %v", e.Op, e.Lease, e.Err)
}

// Is makes errors.Is(err, ErrAmbiguous) true.
func (e *AmbiguousError) Is(target error) bool { return target == ErrAmbiguous }

func (e *AmbiguousError) Unwrap() error { return e.Err }

// IsRetryable reports whether err is transient (a dropped connection, a
// timeout, a serialization failure) so that the same call may succeed if
// repeated. ErrLost, ErrHeld and ErrInvalid are answers, never retryable.
func IsRetryable(err error) bool {
	var r interface{ Retryable() bool }
	if errors.As(err, &r) {
		return r.Retryable()
	}
	return false
}

// dbError wraps a database error with the operation and whether it may be retried.
type dbError struct {
	op        string
	lease     string
	err       error
	retryable bool
}

func (e *dbError) Error() string {
	if e.lease != "" {
		return fmt.Sprintf("fence: %s %q: %v", e.op, e.lease, e.err)
	}
	return fmt.Sprintf("fence: %s: %v", e.op, e.err)
}
func (e *dbError) Unwrap() error   { return e.err }
func (e *dbError) Retryable() bool { return e.retryable }
