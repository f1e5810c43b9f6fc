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

// containment: only Linux has a shim, namespaces and cgroups.
type containment struct{}

// contain says that only the command's process group is signalled here,
// and refuses to go on with --require-containment.
func (a *app) contain(ctx context.Context, o runOpts, sup *supervisor) error {
	if o.requireContainment {
		return fail(ExitCannotExec, errors.New("refusing to run without real containment (--require-containment): this system has no PID namespaces or cgroups for fence run"), "run fence run on Linux")
	}
	fmt.Fprintln(a.stderr, "fence run: warning: containment is best effort here: only the command's process group is signalled; a descendant that leaves it, or a job that stops or kills fence, runs on unsupervised")
	return nil
}

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
