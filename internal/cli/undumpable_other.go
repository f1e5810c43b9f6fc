//go:build !linux

package cli

// undumpable does nothing outside Linux: there, a process's environment is
// not a file another process of the same user can read.
func undumpable() error { return nil }
