package cli

import "golang.org/x/sys/unix"

// undumpable makes this process non-dumpable: /proc/<pid>/environ (which
// shows the environment fence was started with, FENCE_DSN and its password
// included, whatever fence does to its own environment later), mem, maps
// and fd become root's, and ptrace needs CAP_SYS_PTRACE. A job running as
// the same user therefore cannot read the DSN out of fence. The flag is
// reset by execve, so the job's own processes are unaffected. It does not
// protect against a job running as root.
func undumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
