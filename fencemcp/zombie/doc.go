// Package zombie is fencemcp's zombie-agent conformance suite. Its tests
// run an agent, an MCP server whose tool writes to the fence database, and
// the faults that make agents into zombies — a stopped agent resumed after
// a takeover, a lost response and a retry, a resumed copy of the task on
// another worker, a replan in the middle of a tool call, a server that
// ignores cancels — over both SDKs and both transports, on SQLite,
// PostgreSQL and MySQL/MariaDB (FENCE_TEST_POSTGRES, FENCE_TEST_MYSQL; the
// agent's ledger writes through Store.Exec, the tool's through
// LeaseChecker.InTx, so both fenced writes run on each database). Every tool
// execution and every epoch change is recorded as an operation and the
// history is checked with porcupine against a model of a fenced ledger: an
// effect commits only at the current epoch, and at most once per step.
//
// Each scenario runs twice: fenced (fencemcp on both sides, the tool's write
// checked under the lease row's lock and deduplicated by step key) and as a
// control with neither, which must be caught (duplicates and stale effects)
// in every interleaving; a control that passes fails the suite.
//
// The default budget is short (ZOMBIE_N interleavings per scenario, SDK and
// transport, default 4). The documented long run is
//
//	cd fencemcp && ZOMBIE_N=2500 go test ./zombie -run TestZombie -timeout 3h
//
// which makes 10,000 interleavings per scenario (2,500 on each of the four
// SDK × transport combinations), fenced and control each.
package zombie
