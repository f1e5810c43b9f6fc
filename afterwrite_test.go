package fence

import (
	"context"
	sqldriver "database/sql/driver"
	"fmt"
	"testing"
)

// afterWrite stands for a driver's error after a committed write of the
// same call, wrapping ErrBadConn (what MySQL's LAST_INSERT_ID read-back
// returned when the caller's context was cancelled after the revoke).
type afterWrite struct{ err error }

func (e afterWrite) Error() string    { return e.err.Error() }
func (e afterWrite) Unwrap() error    { return e.err }
func (e afterWrite) AfterWrite() bool { return true }

func TestBadConnAfterWriteIsAmbiguous(t *testing.T) {
	s, err := testOpen(context.Background(), "sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.definite(fmt.Errorf("exec: %w", sqldriver.ErrBadConn)) {
		t.Error("ErrBadConn before sending must stay a definite failure")
	}
	if s.definite(fmt.Errorf("revoke: %w", afterWrite{sqldriver.ErrBadConn})) {
		t.Error("ErrBadConn after a committed write of the same call was reported definite; its outcome is unknown")
	}
}
