//go:build unix && !linux

package cli

import "syscall"

// sysProcAttr puts the command in a process group of its own, so that it
// and everything it starts can be signalled together.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
