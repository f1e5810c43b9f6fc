// Command fence-torture runs fence's torture harness (internal/torture):
// many clients, random lease operations and fenced writes, injected faults,
// and a linearizability check of the recorded history. It prints a progress
// line every second to stderr and a summary to stdout whose last line is
// "violations: N". Exit status: 0 clean, 1 violations, 2 errors or checks
// that could not decide.
//
//	go run ./cmd/fence-torture --dsn postgres://postgres@127.0.0.1:5432/test --duration 60s --faults all
//	go run ./cmd/fence-torture --dsn postgres://postgres@127.0.0.1:5432/test --pgx --duration 60s   # pgx-native stores
//	go run ./cmd/fence-torture --unsafe --duration 10s   # the control: must report violations
//	go run ./cmd/fence-torture --dsn postgres://postgres@127.0.0.1:5432/test --old-fence-rule --faults rollback --duration 10s   # must report fences reused
//	go run ./cmd/fence-torture --dsn 'mysql://root@127.0.0.1:3311/fence?wsrep_sync_wait=7' --client-dsns 'mysql://root@127.0.0.1:3311/fence?wsrep_sync_wait=7,mysql://root@127.0.0.1:3312/fence?wsrep_sync_wait=7,mysql://root@127.0.0.1:3313/fence?wsrep_sync_wait=7' --faults pause,skew,cancel   # Galera (clusters/galera/galera.sh): clients over the 3 nodes
//	bash proof/pg-failover.sh   # a primary and a standby, failed over again and again (--failover-cmd)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/internal/nemesis"
	"github.com/fencekit/fence/internal/torture"
)

func main() {
	os.Exit(run())
}

func run() int {
	var cfg torture.Config
	faults := "all"
	flag.StringVar(&cfg.DSN, "dsn", "", "database DSN (default: a SQLite file in a temporary directory)")
	var clientDSNs string
	flag.StringVar(&clientDSNs, "client-dsns", "", "comma-separated DSNs of a cluster's nodes (MariaDB Galera) to spread the clients over, client i on node i mod n; --dsn stays the harness's own (add wsrep_sync_wait=7 to each on Galera)")
	flag.IntVar(&cfg.Clients, "clients", 16, "concurrent clients, each with its own store")
	flag.IntVar(&cfg.Leases, "leases", 3, "lease names, each with a protected row")
	flag.DurationVar(&cfg.Duration, "duration", 0, "how long to run (0: until --ops)")
	flag.Int64Var(&cfg.Ops, "ops", 0, "stop after this many operations (0: until --duration)")
	flag.StringVar(&faults, "faults", faults, "faults to inject: all, none, or a list of pause,proxy,restart,skew,cancel,rollback (all leaves out proxy on SQLite)")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "schedule seed (0: pick one and print it)")
	flag.StringVar(&cfg.Out, "out", "", "directory for failing windows' histories and porcupine's HTML visualisation")
	flag.BoolVar(&cfg.Unsafe, "unsafe", false, "control: check with IsHeld in Go, then write without the fence; must report violations")
	flag.DurationVar(&cfg.TTL, "ttl", 150*time.Millisecond, "lease TTL (pauses last 1.2–2× it)")
	flag.DurationVar(&cfg.Window, "window", 1500*time.Millisecond, "time between quiesced barriers; each window is checked on its own")
	flag.DurationVar(&cfg.OpTimeout, "op-timeout", 2*time.Second, "deadline of each call")
	flag.DurationVar(&cfg.CheckTimeout, "check-timeout", 60*time.Second, "porcupine's budget per window and lease (running out is reported as unknown)")
	flag.BoolVar(&cfg.Pgx, "pgx", false, "PostgreSQL only: every client store is pgx-native (pgxpool + postgres.NewPool, no database/sql); fenced writes use Store.Exec, fencepgx.Exec, fencepgx.InTx and fencepgx.CheckTx in a pgx.Tx")
	flag.BoolVar(&cfg.Keep, "keep", false, "leave the tables in place")
	flag.BoolVar(&cfg.OldFenceRule, "old-fence-rule", false, "control, PostgreSQL only: test triggers on the run's lease table make each new fence the previous one + 1 (the rule before the floor from the database clock); with the rollback fault the external checker must report a fence handed out twice")
	flag.BoolVar(&cfg.GaleraOldGuard, "galera-old-guard", false, "control, MariaDB Galera only (--dsn a node with log_bin and log_slave_updates, clusters/galera/galera.sh): fenced writes use the single-statement share-lock guard fence had before it knew Galera; the stale commits it lets through must be reported (the event log is ordered by the node's binary log)")
	flag.StringVar(&cfg.FailoverCmd, "failover-cmd", "", "shell command that fails the cluster's primary over to a standby, run every 3–6 s while the clients run; it prints primary-lost, promoted and lost-wal-bytes N lines (internal/torture/failover.go; proof/pg-failover.sh). --dsn must then be a multi-host DSN with target_session_attrs=read-write")
	flag.BoolVar(&cfg.FailoverLossy, "failover-lossy", false, "with --failover-cmd: the cluster replicates asynchronously, a failover may lose reported commits; windows with one are judged by the external resources only (no fence handed out twice)")
	flag.BoolVar(&cfg.RaiseAfterFailover, "raise-after-failover", false, "with --failover-lossy: run Store.RaiseFences right after each failover, as docs/RUNBOOK.md tells an operator to")
	var nemNet, nemKinds string
	var nemFO time.Duration
	var nemKeep int
	var nemReplay string
	var nemKill int
	var nemKillCmd, nemRejoinCmd, nemWholeCmd, nemMembersCmd string
	flag.StringVar(&nemNet, "nemesis", "", "network partitions between the cluster's nodes, each in a network namespace (fence-nemesis up): PREFIX:NODES:SUBNET, e.g. fn:3:10.77.0; the schedule is drawn from --seed and written to --out/nemesis.json (clusters/partitions.sh)")
	flag.StringVar(&nemKinds, "nemesis-faults", "all", "with --nemesis: split, isolate, bridge, oneway, flap-short, flap-long, or all")
	flag.DurationVar(&nemFO, "nemesis-failover-timeout", 6*time.Second, "with --nemesis: the cluster's failover timeout; cuts are drawn shorter and longer than it and the TTL")
	flag.IntVar(&nemKeep, "nemesis-keep", 0, "with --nemesis: a node never cut off into a minority (the --dsn node on Galera, whose binary log orders the checks)")
	flag.StringVar(&nemReplay, "nemesis-replay", "", "with --nemesis: play this recorded schedule (an earlier run's nemesis.json) instead of drawing one; use the same --seed")
	flag.IntVar(&nemKill, "nemesis-kill", 0, "with --nemesis: SIGKILL this node once, a third into the run, and rejoin it 5 s later, as a step of the schedule (no cut while it is down; killed only when --nemesis-whole-cmd says the cluster is whole)")
	flag.StringVar(&nemKillCmd, "nemesis-kill-cmd", "", "with --nemesis-kill: shell command to kill a node, its number appended (e.g. 'bash clusters/galera/galera.sh kill')")
	flag.StringVar(&nemRejoinCmd, "nemesis-rejoin-cmd", "", "with --nemesis-kill: shell command that restarts a node and returns once it has rejoined, its number appended")
	flag.StringVar(&nemWholeCmd, "nemesis-whole-cmd", "", "with --nemesis-kill: shell command that exits 0 when every node is up and in the primary component")
	flag.StringVar(&nemMembersCmd, "nemesis-members-cmd", "", "with --nemesis: shell command printing 'alive: N…' and 'synced: N…' (galera.sh members); asked before each cut: a node found dead is restarted (--nemesis-rejoin-cmd) and no cut leaves --nemesis-keep without a majority of synced nodes")
	strict := true
	flag.BoolVar(&strict, "strict-acquire", strict, "take an acquire reported as a definite failure at its word: one that committed is a violation (--strict-acquire=false models it as maybe and counts such commits on the summary's FINDING line)")
	flag.Parse()
	cfg.LenientAcquire = !strict
	if nemNet != "" {
		nc, err := parseNemesis(nemNet, nemKinds)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fence-torture:", err)
			return 2
		}
		nc.FailoverTimeout, nc.Keep, nc.Replay = nemFO, nemKeep, nemReplay
		nc.Kill, nc.KillCmd, nc.RejoinCmd, nc.WholeCmd, nc.MembersCmd = nemKill, nemKillCmd, nemRejoinCmd, nemWholeCmd, nemMembersCmd
		cfg.Nemesis = nc
	}
	for _, d := range strings.Split(clientDSNs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.ClientDSNs = append(cfg.ClientDSNs, d)
		}
	}
	if cfg.Duration == 0 && cfg.Ops == 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.DSN == "" {
		cfg.DSN = os.Getenv("FENCE_DSN")
	}
	if cfg.Pgx {
		// Before the SQLite default: --pgx without a DSN is a usage error.
		d, err := fencedsn.Parse(cfg.DSN)
		if err != nil || d.Dialect != fence.Postgres {
			got := "none (the default is a SQLite file)"
			switch {
			case err == nil:
				got = d.Redacted
			case cfg.DSN != "":
				got = err.Error()
			}
			fmt.Fprintf(os.Stderr, "fence-torture: --pgx needs a PostgreSQL DSN (--dsn or FENCE_DSN: postgres://… or postgresql://…), got %s\n", got)
			return 2
		}
	}
	if cfg.DSN == "" {
		dir, err := os.MkdirTemp("", "fence-torture-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer os.RemoveAll(dir)
		cfg.DSN = "sqlite:" + dir + "/torture.db"
	}
	f, err := torture.ParseFaults(faults)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if faults == "all" {
		f = torture.FaultsFor(f, cfg.DSN)
	}
	cfg.Faults = f
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	cfg.Progress = os.Stderr
	fmt.Fprintf(os.Stderr, "fence-torture: seed %d, faults %s\n", cfg.Seed, cfg.Faults)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := torture.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence-torture:", err)
		fmt.Println("violations: unknown (the run failed)")
		return 2
	}
	r.WriteSummary(os.Stdout)
	return r.ExitCode()
}

// parseNemesis reads --nemesis PREFIX:NODES:SUBNET and --nemesis-faults.
func parseNemesis(spec, kinds string) (*torture.NemesisConfig, error) {
	parts := strings.Split(spec, ":")
	if len(parts) != 3 {
		return nil, fmt.Errorf("--nemesis %q: want PREFIX:NODES:SUBNET, e.g. fn:3:10.77.0", spec)
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		return nil, fmt.Errorf("--nemesis %q: NODES is not a number", spec)
	}
	net := nemesis.Net{Prefix: parts[0], Nodes: n, Subnet: parts[2]}
	if err := net.Validate(); err != nil {
		return nil, err
	}
	ks, err := nemesis.ParseKinds(kinds)
	if err != nil {
		return nil, err
	}
	return &torture.NemesisConfig{Net: net, Kinds: ks}, nil
}
