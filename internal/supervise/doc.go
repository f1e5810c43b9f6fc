// Package supervise keeps a command's whole process tree inside the lease
// that fence run holds, on Linux:
//
//   - The supervisor (fence run) and the shim are child subreapers
//     (PR_SET_CHILD_SUBREAPER): a descendant that daemonizes, calls setsid or
//     leaves its process group is reparented to the nearest of them, not to
//     init, so it can still be found (by walking /proc) and killed.
//   - The shim (fence __shim) sits between the supervisor and the command. It
//     holds a dead-man's switch: the supervisor feeds it each proven kill
//     deadline (boot time, which counts a suspend); when the last one passes
//     unrenewed — the supervisor was SIGSTOPped, or is stuck — the shim kills
//     the tree. When the supervisor dies (kill -9, the OOM killer) the
//     shim's control pipe reaches EOF and it kills the tree at once.
//   - Where a cgroup v2 hierarchy is writable, the command runs in a cgroup
//     of its own: cgroup.kill kills every process in it, whatever it did to
//     its parentage, and cgroup.freeze stops it for ^Z.
//
// What remains: a frozen or suspended machine runs nothing, the shim
// included (the database's clock may move on meanwhile; fenced writes
// still refuse a stale owner); supervisor and shim both stopped or both
// killed at once leave the tree unsupervised unless it is in a cgroup that
// someone else kills; a descendant that has another, unrelated process start
// work for it (a daemon, ssh, systemd-run, at) is outside the tree and any
// cgroup of ours.
package supervise
