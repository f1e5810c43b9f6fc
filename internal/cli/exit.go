package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fencekit/fence"
)

// Exit statuses of the fence command, from BSD sysexits.h where one fits.
// `fence run` otherwise exits with its command's own status.
const (
	ExitOK          = 0
	ExitFailure     = 1  // any other error
	ExitUsage       = 64 // EX_USAGE: bad flag, argument or input
	ExitUnavailable = 69 // EX_UNAVAILABLE: the database could not be reached
	ExitNotAcquired = 75 // EX_TEMPFAIL: the lease is held by another owner
	ExitLost        = 76 // EX_PROTOCOL: the lease was lost, or the completion rejected as stale
	ExitCannotExec  = 126
	ExitNotFound    = 127
	// A command killed by signal S exits 128+S, as in a shell.
	exitSignalBase = 128
)

// exitError is an error with the exit status it maps to and a hint that
// tells the user what to do about it. Main prints it as one line.
type exitError struct {
	code int
	err  error
	hint string
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// fail returns err with an exit status and a hint.
func fail(code int, err error, hint string) error {
	return &exitError{code: code, err: err, hint: hint}
}

// usagef is a usage error (exit 64).
func usagef(hint, format string, args ...any) error {
	return fail(ExitUsage, fmt.Errorf(format, args...), hint)
}

// classify gives the exit status and hint for err: its own when it is an
// exitError, else one chosen by what the library says the error is.
func classify(err error, cmdPath string) (int, string) {
	var e *exitError
	if errors.As(err, &e) {
		return e.code, e.hint
	}
	switch {
	case errors.Is(err, fence.ErrInvalid):
		return ExitUsage, "see '" + cmdPath + " --help'"
	case errors.Is(err, fence.ErrUnavailable), errors.Is(err, fence.ErrAmbiguous), fence.IsRetryable(err):
		return ExitUnavailable, unavailableHint
	case errors.Is(err, fence.ErrNotFound):
		return ExitFailure, "'fence leases' and 'fence runs' list what exists"
	case errors.Is(err, fence.ErrLost):
		return ExitLost, ""
	case errors.Is(err, fence.ErrHeld):
		return ExitNotAcquired, ""
	}
	return ExitFailure, ""
}

const unavailableHint = "check --dsn (or FENCE_DSN) and that the database is running and reachable"

// oneLine makes an error message fit one line and drops the library's
// "fence: " prefixes, which the command name already says.
func oneLine(msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	for strings.HasPrefix(msg, "fence: ") {
		msg = strings.TrimPrefix(msg, "fence: ")
	}
	return strings.ReplaceAll(msg, ": fence: ", ": ")
}
