//go:build unix

package cli

import (
	"os"
	"syscall"
)

// forwardedSignals are passed on to the command's process group. The
// command is in a group of its own, so a terminal's ^C reaches only fence.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}

func signalLabel(s os.Signal) string {
	if n, ok := s.(syscall.Signal); ok {
		return signalName(n)
	}
	return s.String()
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return s.String()
}

// stopSelf stops fence for a job-control signal, as the default action
// would have (SIGCONT and the others need nothing).
func stopSelf(sig os.Signal) {
	if sig == syscall.SIGTSTP {
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
}
