//go:build !unix

package cli

import (
	"context"
	"errors"
	"os"
)

var forwardedSignals = []os.Signal{os.Interrupt}

var jobControlSignals []os.Signal

func prepareProcess() error { return nil }

func signalNumber(os.Signal) int { return 2 }

func signalLabel(s os.Signal) string { return s.String() }

// job needs process groups, which this platform does not have.
func (s *supervisor) job(ctx context.Context) error {
	return errors.New("fence run needs a Unix system: it signals the command's process group")
}

func stopSelf(os.Signal) {}

// ShimCommand is the hidden argument of the shim, which only Linux uses.
const ShimCommand = "__shim"

// Shim exists on Linux only.
func Shim([]string) int { return 2 }
