package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencekit/fence/internal/bench"
)

const benchLong = `Measure fence against the floor of the database it runs on: each lease
operation (acquire, renew, release, takeover, is-held, a refused acquire) and
fenced write next to its baseline, measured interleaved in the same run:

  floor_update    a single-row UPDATE by primary key that changes the row, on
                  a table shaped like the lease table (baseline of acquire,
                  renew, release, takeover)
  select_1        SELECT 1 (baseline of is_held and acquire_held)
  unfenced_write  the fenced write's statement without the fence
  unfenced_tx     the fenced transaction without LockTx
  unfenced_tx_pgx the same on a pgx pool (PostgreSQL): Begin, UPDATE, Commit
                  (baseline of fenced_tx_pgx, fencepgx.InTx)

No targets, there to split a case's cost: floor_update_wide is the floor
UPDATE writing the columns an acquire writes (what the row itself costs);
fenced_write_sql, tx_pk_read and tx_pgx_check_sql send a fenced case's
statements by hand, without fence's API (what is the database's work and
what fence's Go side): the statement Store.Exec sends; BEGIN, a plain read
of the lease row, the UPDATE, COMMIT (the round trip database/sql cannot
batch); fencepgx.InTx's batch, the UPDATE, COMMIT. renew_cancel_ctx is renew
called with a context that can be cancelled: database/sql starts a
goroutine for each query under such a context (none for an Exec such as
the floor's), so the other cases run with a context that cannot be
cancelled (an interrupt stops the run between operations).

ROUND TRIPS counts the calls that reached the database (statements, BEGIN,
COMMIT, prepares; a pgx batch once), by a wrapper around the driver's
connections (a tracer on the pgx pool), or on PostgreSQL the network turns
where those are more (a statement run on pgx's own connection). The alternatives (PostgreSQL
advisory locks, GET_LOCK) are timed as a lock-and-unlock cycle next to
fence's, with what each gives up. The order of
the cases is shuffled in every round, and the last row is the machine's load
average at the start and the end of the run.
--scale adds batch renewal, the runner's steady state, handoff between
processes, takeover after a crash and many names (a minute or more).

--peers measures fence next to its peers instead, interleaved in one
process: a ShedLock-shaped lease (database time), River's leader election
SQL (logged and unlogged table), and as the non-durable floor advisory
locks, GET_LOCK and Redis SET NX PX; then the contended scenario (16
workers on 1 and on 1,000 leases, --contended-rounds times each in a new
random order every round; the medians are reported, with every round's
ratio to fence). The peers live in a module of their own
so that fence does not link a Redis client: --peers runs the command
fence-bench-peers ($FENCE_BENCH_PEERS, else next to this executable, else
on $PATH), built from internal/bench/peers:

  (cd internal/bench/peers && go build -o "$(go env GOPATH)/bin/" ./cmd/fence-bench-peers)

The bench works on tables of its own (a random prefix; --prefix is not
used) and drops them when done. Progress goes to stderr. --json prints a
list of objects with name, dialect, ns_per_op (the median),
round_trips_per_op, baseline, ratio_to_baseline, target, met and more.
docs/BENCHMARKS.md has the results and how to read them.`

func (a *app) benchCmd() *cobra.Command {
	var (
		scale, quick, peers bool
		rounds              int
		budget, contended   time.Duration
		batch               int
		redis, steps        string
		contendedRounds     int
	)
	cmd := &cobra.Command{
		Use:   "bench [--scale | --peers] [--quick] [--rounds N] [--budget D] [--batch N] [--steps S] [--redis ADDR] [--contended D] [--contended-rounds N] [--json]",
		Short: "Benchmark fence against the database's own floor",
		Long:  benchLong,
		Example: `  fence bench --dsn postgres://postgres@127.0.0.1:5432/test
  fence bench --dsn mysql://root@127.0.0.1:3306/test --scale --json > mariadb.json
  fence bench --dsn postgres://postgres@127.0.0.1:5432/test --peers --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.parseDSN(); err != nil {
				return err
			}
			if rounds < 1 {
				return usagef("at least 1", "--rounds %d", rounds)
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			if contendedRounds < 1 {
				return usagef("at least 1", "--contended-rounds %d", contendedRounds)
			}
			if peers {
				if scale {
					return usagef("run them one after the other", "--peers and --scale together")
				}
				f := cmd.Flags()
				var pass []string
				for _, name := range []string{"quick", "rounds", "budget", "batch", "redis", "contended", "contended-rounds"} {
					if f.Changed(name) {
						pass = append(pass, "--"+name+"="+f.Lookup(name).Value.String())
					}
				}
				if a.json {
					pass = append(pass, "--json")
				}
				return a.runPeers(ctx, pass)
			}
			if cmd.Flags().Changed("redis") || cmd.Flags().Changed("contended") || cmd.Flags().Changed("contended-rounds") {
				return usagef("the Redis lock and the contended scenario are part of --peers", "--redis, --contended and --contended-rounds need --peers")
			}
			cfg := bench.Config{Rounds: rounds, Budget: budget, Batch: batch, Scale: scale, Log: a.stderr}
			if steps != "" {
				cfg.ScaleConfig.Steps = strings.Split(steps, ",")
			}
			if quick {
				cfg.Rounds, cfg.Budget, cfg.MinOps = 1, 20*time.Millisecond, 2
				cfg.ScaleConfig.Quick = true
			}
			rs, err := bench.Run(ctx, a.dsn, cfg)
			if err != nil {
				return err
			}
			if a.json {
				return bench.WriteJSON(a.stdout, rs)
			}
			return bench.WriteTable(a.stdout, rs)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&scale, "scale", false, "also run the scale experiments (a minute or more)")
	f.BoolVar(&quick, "quick", false, "a few operations of each case only: checks that it runs, not how fast")
	f.IntVar(&rounds, "rounds", 5, "each case runs `N` × --budget in all, interleaved with the others")
	f.DurationVar(&budget, "budget", 200*time.Millisecond, "time per case per round")
	f.IntVar(&batch, "batch", 1, "operations of one case back to back before the next case's turn")
	f.StringVar(&steps, "steps", "", "with --scale, only these experiments (comma-separated: batch,runner,handoff,crash,many)")
	f.BoolVar(&peers, "peers", false, "measure fence next to its peers (runs fence-bench-peers; see above)")
	f.StringVar(&redis, "redis", "127.0.0.1:6379", "with --peers, Redis `address` for the Redis lock; empty leaves it out")
	f.DurationVar(&contended, "contended", 2*time.Second, "with --peers, how long each contended scenario runs")
	f.IntVar(&contendedRounds, "contended-rounds", 3, "with --peers, run every contended scenario `N` times, interleaved in a new random order each round, and report the medians")
	return cmd
}

// peersCommand is the program --peers runs.
const peersCommand = "fence-bench-peers"

// runPeers runs fence-bench-peers with the DSN in its environment (not on
// its command line, where ps would show the password) and its output
// passed through.
func (a *app) runPeers(ctx context.Context, args []string) error {
	path, err := findPeers()
	if err != nil {
		return fail(ExitNotFound, err, "build it: (cd internal/bench/peers && go build -o \"$(go env GOPATH)/bin/\" ./cmd/fence-bench-peers), or set FENCE_BENCH_PEERS to its path")
	}
	c := exec.CommandContext(ctx, path, args...)
	c.Env = append(os.Environ(), "FENCE_DSN="+a.dsn)
	c.Stdout, c.Stderr = a.stdout, a.stderr
	if err := c.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			return fail(ee.ExitCode(), fmt.Errorf("%s exited with status %d", peersCommand, ee.ExitCode()), "")
		}
		return fail(ExitCannotExec, fmt.Errorf("%s: %w", path, err), "")
	}
	return nil
}

// findPeers looks for fence-bench-peers in $FENCE_BENCH_PEERS, next to the
// running executable, then on $PATH.
func findPeers() (string, error) {
	if p := os.Getenv("FENCE_BENCH_PEERS"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("FENCE_BENCH_PEERS=%s: %w", p, err)
		}
		return p, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), peersCommand)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath(peersCommand)
	if err != nil {
		return "", fmt.Errorf("%s is not installed (not next to this executable, not on $PATH): it is a module of its own, so that fence does not link a Redis client", peersCommand)
	}
	return p, nil
}
