package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencekit/fence/internal/driver"
)

// Server error numbers that mean "try again", not "no".
const (
	erConCount          = 1040 // too many connections
	erServerShutdown    = 1053
	erNetReadError      = 1158
	erNetReadInterrupt  = 1159
	erNetErrorOnWrite   = 1160
	erNetWriteInterrupt = 1161
	erLockWaitTimeout   = 1205
	erLockDeadlock      = 1213
	erConnectionKilled  = 1927 // MariaDB: the connection was killed (e.g. at shutdown)
	crServerGone        = 2006 // client codes; go-sql-driver reports them as
	crServerLost        = 2013 // ErrInvalidConn, but a proxy may relay them
	erClientIdle        = 4031 // MySQL 8.0.24+: disconnected for inactivity
)

// IsRetryable reports whether err is transient: a lost or refused
// connection, a network timeout, a deadlock, a lock wait timeout or a server
// shutting down. Context cancellation is the caller's decision, not a
// transient failure.
func (d *Driver) IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erConCount, erServerShutdown, erNetReadError, erNetReadInterrupt, erNetErrorOnWrite,
			erNetWriteInterrupt, erLockWaitTimeout, erLockDeadlock, erConnectionKilled,
			crServerGone, crServerLost, erClientIdle:
			return true
		}
		return false
	}
	if errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, gomysql.ErrInvalidConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// IsServerError reports whether err is the server's answer to the statement
// (an error packet), which means the statement, or the transaction when it
// was the COMMIT, did not take effect. Anything else (a broken connection, a
// timeout, a cancelled context) may have struck after the commit, and so may
// an error of a read that follows a committed write in the same call.
//
// A connection that was never made (refused, DNS, a dial timeout: the
// net.OpError of the dial) is definite too: no statement was sent on it; and
// so is any error of a call that had sent only reads (driver.BeforeWrite).
func (d *Driver) IsServerError(err error) bool {
	var we *afterWriteError
	if errors.As(err, &we) {
		return false
	}
	var bw driver.BeforeWriter
	if errors.As(err, &bw) && bw.BeforeWrite() {
		return true
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// afterWriteError is an error that struck after a statement of the same call
// had committed (the read-back of an acquire, the SELECT of a batch renew):
// even an error packet then leaves the call's outcome unknown.
type afterWriteError struct{ err error }

func (e *afterWriteError) Error() string { return e.err.Error() }
func (e *afterWriteError) Unwrap() error { return e.err }

// AfterWrite marks the error for the root package (driver.AfterWriter): an
// ErrBadConn inside it does not mean the statement was never sent.
func (e *afterWriteError) AfterWrite() bool { return true }

func afterWrite(err error) error {
	if err == nil {
		return nil
	}
	return &afterWriteError{err}
}

func isDeadlock(err error) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == erLockDeadlock
}

// deadlockRetries bounds retryDeadlock; a deadlock that repeats this often
// is reported (IsRetryable says it is transient).
const deadlockRetries = 8

// deadlocks counts the deadlock victims retryDeadlock ran again (the tests
// report it).
var deadlocks atomic.Int64

// retryDeadlock runs fn again when InnoDB picked it as a deadlock victim.
// fn must be one autocommit statement or one whole transaction: a victim's
// transaction is rolled back entirely (a lock wait timeout, by contrast,
// rolls back only the statement, so it is not retried here).
func (d *Driver) retryDeadlock(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if !isDeadlock(err) || attempt == deadlockRetries {
			return err
		}
		deadlocks.Add(1)
		// Jitter, so that the same two statements do not meet again.
		wait := time.Duration(rand.Int64N(int64(attempt)*int64(time.Millisecond)) + 1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// exec runs one autocommit statement, again if it was a deadlock victim.
func (d *Driver) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return d.execOn(ctx, d.db, q, args...)
}

func (d *Driver) execOn(ctx context.Context, e execer, q string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := d.retryDeadlock(ctx, func() error {
		var err error
		res, err = e.ExecContext(ctx, q, args...)
		return err
	})
	return res, err
}

// execLastID runs a statement that sets LAST_INSERT_ID(expr) to a positive
// value on every row it changes, and returns the rows changed and that value.
// The server reports the value as the insert id, except that a trigger on
// the table makes MariaDB report 0; the session's LAST_INSERT_ID() keeps it,
// so a 0 is read back on the same connection.
func (d *Driver) execLastID(ctx context.Context, q string, args ...any) (n, id int64, err error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	res, err := d.execOn(ctx, conn, q, args...)
	if err != nil {
		return 0, 0, err
	}
	if n, err = res.RowsAffected(); err != nil || n == 0 {
		return 0, 0, err
	}
	if id, err = res.LastInsertId(); err != nil || id > 0 {
		return n, id, err
	}
	err = conn.QueryRowContext(ctx, d.q["last_insert_id"]).Scan(&id)
	return n, id, afterWrite(err)
}

// execOne runs a statement that changes at most one row and reports whether
// it did. fence's statements change every row they match, so the count is
// the same with and without clientFoundRows.
func (d *Driver) execOne(ctx context.Context, q string, args ...any) (bool, error) {
	res, err := d.exec(ctx, q, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
