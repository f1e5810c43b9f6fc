//go:build !unix

package cli

import (
	"context"
	"errors"
	"os"
)

var forwardedSignals = []os.Signal{os.Interrupt}

func signalNumber(os.Signal) int { return 2 }

func signalLabel(s os.Signal) string { return s.String() }

// job needs process groups, which this platform does not have.
func (s *supervisor) job(ctx context.Context) error {
	return errors.New("fence run needs a Unix system: it signals the command's process group")
}
