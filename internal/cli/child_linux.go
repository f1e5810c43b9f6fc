package cli

import "syscall"

// sysProcAttr puts the command in a process group of its own, so that it
// and everything it starts can be signalled together, and has the kernel
// kill it if fence itself dies (SIGKILL), so it cannot run on unsupervised.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
