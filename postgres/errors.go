package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencekit/fence/internal/driver"
)

// IsRetryable reports whether err is transient: the same call may succeed if
// made again. An error caused by the caller's own context ending is not: the
// caller gave up, and retrying under the same context cannot succeed. A
// timeout inside the driver or the network (a read deadline,
// statement_timeout) is, and so is any failure to connect: pgx implements
// connect_timeout as a context deadline of its own, so a ConnectError is
// judged before the context test. (If it was the caller's context that ended
// during the connect, the retry fails at once with the context's error.)
func (d *Driver) IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return retryableCode(pgErr.Code)
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var netErr net.Error
	switch {
	case pgconn.SafeToRetry(err), pgconn.Timeout(err), errors.As(err, &netErr):
		return true
	case errors.Is(err, sqldriver.ErrBadConn), errors.Is(err, sql.ErrConnDone):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	return false
}

// retryableCode reports whether a server error is about this attempt rather
// than about the statement: lock and serialization conflicts, the server going
// away or not yet accepting, a cancelled statement.
func retryableCode(code string) bool {
	switch code {
	case "40001", // serialization_failure
		"40P01", // deadlock_detected
		"55P03", // lock_not_available (lock_timeout, NOWAIT)
		"57014", // query_canceled (statement_timeout, pg_cancel_backend)
		"57P01", // admin_shutdown
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now
		"53300": // too_many_connections
		return true
	}
	return strings.HasPrefix(code, "08") // connection_exception
}

// IsServerError reports whether err is a definite refusal: the server
// answered the statement with an error (so an autocommit statement did not
// commit), or the statement was never sent: no connection could be made
// (refused, DNS, or the server's FATAL answer to the startup, such as 53300
// too many clients: a ConnectError, judged before the FATAL test below), pgx
// says so (SafeToRetry), or pgx refused the arguments before executing.
// Any other failure of a write, such as a connection lost while waiting for
// the reply, leaves its outcome unknown. The root package looks for this
// method to tell the two apart.
//
// A FATAL or PANIC error on an open session is not definite: the server is
// ending the session, and it can do so after the commit (a
// synchronous-replication wait cut short by a shutdown reports "the
// transaction has already committed locally").
func (d *Driver) IsServerError(err error) bool {
	// A COMMIT the server answered with ROLLBACK (the transaction had
	// failed): pgx reports the answer as this error, and nothing committed.
	if errors.Is(err, pgx.ErrTxCommitRollback) {
		return true
	}
	// A call that had sent only reads (a read-first refusal) wrote nothing.
	var bw driver.BeforeWriter
	if errors.As(err, &bw) && bw.BeforeWrite() {
		return true
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		sev := pgErr.SeverityUnlocalized
		if sev == "" {
			sev = pgErr.Severity
		}
		return sev == "ERROR"
	}
	return pgconn.SafeToRetry(err) || argError(err)
}

// argError reports pgx's refusals of a statement's arguments, made after
// the statement was described and before it was executed. pgx returns them
// as fmt errors (extended_query_builder.go, conn.go), so only their text
// tells them apart.
func argError(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		msg := e.Error()
		if msg == "mismatched param and argument count" || strings.HasPrefix(msg, "failed to encode args[") ||
			strings.HasPrefix(msg, "expected ") && strings.Contains(msg, " arguments, got ") {
			return true
		}
	}
	return false
}
