// Package escape holds the escape suite of fence run's supervisor (its
// tests only): hostile jobs that try to outlive their lease, by the usual
// means (double fork, setsid, nohup, a PID namespace, a subreaper, a stopped
// child, ignoring SIGTERM, a fork-and-exit loop, a process whose main thread
// has exited) and by attacking the supervisor itself (killing or stopping
// the shim, stopping fence). Every job's descendants write heartbeats; after
// a revoke (or after the job tampered with the supervisor) no heartbeat may
// advance past the documented bound and no process of the job may be alive.
//
// Run it with FENCE_LONG=1 go test -v ./internal/supervise/escape, as root
// and as an unprivileged user (.ci/run's escape step does both). It prints
// one line per scenario per mode:
//
//	escape: uid=0 mode=contained scenario=setsid result=held last-heartbeat=+2.41s dead=+2.47s bound=4.00s
//
// FENCE_ESCAPE_FENCE names a fence binary to use instead of building one
// (the unprivileged run has no Go toolchain of its own).
package escape
