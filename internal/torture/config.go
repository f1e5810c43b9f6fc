// Package torture is fence's torture harness: many concurrent clients run
// random lease and fenced-write operations against one database while
// faults are injected (pauses longer than the TTL, dropped and black-holed
// connections, database restarts, cancelled calls, skewed application
// clocks). Every operation's call, return and result is recorded, and the
// history is checked two ways:
//
//   - with porcupine against a sequential model of "lease register +
//     protected value" (model.go), window by window and lease by lease;
//   - directly against facts the database itself logged in commit order
//     (schema.go): DESIGN.md's invariants 1–5.
//
// Ambiguous outcomes (a connection dropped mid-commit) are modelled as
// "either", never ignored. Run with Unsafe set, the same schedule uses the
// naive design (IsHeld in Go, then an unfenced write), and the harness must
// find violations: that is the proof that the checkers can fail.
package torture

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Fault kinds.
const (
	FaultPause   = "pause"   // a client freezes longer than the TTL at a chosen point
	FaultProxy   = "proxy"   // TCP proxy: reset, black hole, latency
	FaultRestart = "restart" // kill and restart the (private) database server
	FaultSkew    = "skew"    // half the clients' application clocks are off by hours
	FaultCancel  = "cancel"  // calls cut short by a context deadline mid-flight
	// FaultRollback: the lease table goes back to an earlier copy of itself
	// (a restored dump, a promoted asynchronous replica; rollback.go).
	FaultRollback = "rollback"
	// FaultFailover: an external command fails the primary of a replicated
	// cluster over to a standby (Config.FailoverCmd, failover.go). Not in
	// AllFaults: it needs a cluster and the command that drives it.
	FaultFailover = "failover"
)

// AllFaults lists every fault kind.
var AllFaults = []string{FaultPause, FaultProxy, FaultRestart, FaultSkew, FaultCancel, FaultRollback}

// Faults is a set of fault kinds.
type Faults map[string]bool

// ParseFaults parses a comma-separated list: kinds, "all" or "none".
func ParseFaults(s string) (Faults, error) {
	f := Faults{}
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case k == "" || k == "none":
		case k == "all":
			for _, a := range AllFaults {
				f[a] = true
			}
		case slices.Contains(AllFaults, k):
			f[k] = true
		default:
			return nil, fmt.Errorf("torture: unknown fault %q (want %s, all or none)", k, strings.Join(AllFaults, ", "))
		}
	}
	return f, nil
}

func (f Faults) String() string {
	var ks []string
	for _, k := range AllFaults {
		if f[k] {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		return "none"
	}
	return strings.Join(ks, ",")
}

// Config is one torture run. Zero fields take the defaults of Defaults.
type Config struct {
	// DSN picks the database (and the dialect). With the restart fault on
	// PostgreSQL or MySQL/MariaDB, the harness starts a private server of
	// that kind instead and only the dialect is taken from DSN.
	DSN string
	// ClientDSNs, when set, spreads the clients over several servers of one
	// database cluster (MariaDB Galera nodes): client i opens its store on
	// ClientDSNs[i % len]; DSN stays the harness's own (setup, barriers).
	// The restart, proxy and rollback faults act on one server and are
	// refused with it. On Galera give every DSN wsrep_sync_wait=7: reads
	// are linearizable across nodes only then, and the model checks them.
	ClientDSNs []string
	// Clients run concurrently, each with its own Store (own pool, own
	// clock), like separate processes.
	Clients int
	// Leases is the number of lease names, each with its protected row.
	Leases int
	// Duration bounds the run; Ops bounds the number of operations. The run
	// stops at whichever comes first (0 = no bound; one must be set).
	Duration time.Duration
	Ops      int64
	Faults   Faults
	// Seed makes the schedule reproducible: each client draws its choices
	// from a PCG seeded with (Seed, client), and so does the fault
	// injector. Timing (and so interleaving) is the machine's.
	Seed uint64
	// Out, when set, receives the failing windows' histories (JSON) and
	// porcupine's visualisations (HTML) on a violation or an unknown check.
	Out string
	// Unsafe runs the naive design: IsHeld, then a write without the fence.
	Unsafe bool
	// GaleraOldGuard is the Galera control (MariaDB Galera only): the
	// clients' fenced writes use the guard fence had before it knew Galera,
	// the single statement UPDATE … AND EXISTS (… LOCK IN SHARE MODE) that
	// Store.Fenced still builds (and a transaction that starts with it),
	// whose share lock guards nothing across nodes. The stale writes it
	// lets commit must be found: the event log is then ordered by the admin
	// node's binary log (binlog.go), which needs log_bin and
	// log_slave_updates on that node (clusters/galera/galera.sh sets both).
	GaleraOldGuard bool
	// Pgx makes every client's store pgx-native (PostgreSQL only): its own
	// pgxpool.Pool from the client DSN (postgres.NewPoolConfig) and
	// postgres.NewPool, so no database/sql is involved; the clients' plain
	// reads go through the pool, fenced statements through Store.Exec and
	// fencepgx.Exec, fenced transactions through fencepgx.InTx and through
	// a pgx.Tx with fencepgx.CheckTx and fencepgx.Exec. The admin handle
	// (setup, barriers) stays database/sql.
	Pgx bool
	// OldFenceRule is the rollback fault's control (PostgreSQL only): test
	// triggers on the run's own lease table make every new generation's
	// fence the previous one plus one, the rule fence had before the floor
	// from the database clock, so that a rollback hands a fence out twice.
	// With the rollback fault on, the external checker must report it.
	OldFenceRule bool

	// TTL of every lease (default 150ms); pauses last 1.2–2× TTL.
	TTL time.Duration
	// Window is how long clients run between two quiesced barriers (default
	// 1.5s); each window is checked on its own, and porcupine's search grows
	// steeply with the calls left open to a window's end.
	Window time.Duration
	// OpTimeout bounds each call (default 2s).
	OpTimeout time.Duration
	// CheckTimeout bounds porcupine per window and lease (default 60s); a
	// check that runs out is reported as unknown, never as a pass.
	CheckTimeout time.Duration
	// Progress receives a progress line every second (nil: none).
	Progress io.Writer
	// Keep leaves the tables in place after the run.
	Keep bool
	// LenientAcquire models an acquire that fence reported as a definite
	// failure as "maybe" (it may have committed), and counts each
	// acquisition the database log shows committed that only such a call
	// can explain as a finding in the summary instead of a violation. By
	// default (false) a definite failure is taken at its word: it must not
	// have committed, as DESIGN.md's rule on ambiguous outcomes says, and the
	// model and the ambiguity-contract check hold fence to it. Lenient mode
	// was the default while Store.Acquire reported some committed acquires
	// as definite failures (fixed in ffffa00; docs/RELIABILITY.md).
	LenientAcquire bool
	// FailoverCmd, when set, is run by sh -c every 3–6 s of window time (the
	// first 1–3 s in) to fail the cluster's primary over to a standby while
	// the clients run (failover.go says what it must print). DSN must reach
	// whichever server is primary: a multi-host DSN with
	// target_session_attrs=read-write.
	FailoverCmd string
	// FailoverLossy says the cluster replicates asynchronously: a failover
	// may lose commits the clients were told about, so a window with one is
	// judged by the external resources only, and the facts restart from the
	// promoted database.
	FailoverLossy bool
	// RaiseAfterFailover runs Store.RaiseFences(0) right after each lossy
	// failover, as the runbook tells an operator to.
	RaiseAfterFailover bool
	// Nemesis, when set, plays network partitions between the nodes of
	// the cluster the client DSNs reach, each node in a network namespace
	// of its own (partition.go).
	Nemesis *NemesisConfig
}

func (c *Config) defaults() error {
	if c.Clients <= 0 {
		c.Clients = 16
	}
	if c.Leases <= 0 {
		c.Leases = 3
	}
	if c.TTL <= 0 {
		c.TTL = 150 * time.Millisecond
	}
	if c.Window <= 0 {
		c.Window = 1500 * time.Millisecond
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 2 * time.Second
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = 60 * time.Second
	}
	if c.Faults == nil {
		c.Faults = Faults{}
	}
	if c.Duration <= 0 && c.Ops <= 0 {
		return fmt.Errorf("torture: set a duration or an op count")
	}
	if c.DSN == "" {
		return fmt.Errorf("torture: no DSN")
	}
	return nil
}
