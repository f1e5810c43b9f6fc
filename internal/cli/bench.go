package cli

import (
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

ROUND TRIPS counts the calls that reached the database (statements, BEGIN,
COMMIT, prepares), by a wrapper around the driver's connections. The
alternatives (PostgreSQL advisory locks, GET_LOCK, a Redis lock) are timed
as a lock-and-unlock cycle next to fence's, with what each gives up.
--scale adds batch renewal, the runner's steady state, handoff between
processes, takeover after a crash and many names (a minute or more).

The bench works on tables of its own (a random prefix; --prefix is not
used) and drops them when done. Progress goes to stderr. --json prints a
list of objects with name, dialect, ns_per_op (the median),
round_trips_per_op, baseline, ratio_to_baseline, target, met and more.
docs/BENCHMARKS.md has the results and how to read them.`

func (a *app) benchCmd() *cobra.Command {
	var (
		scale, quick bool
		rounds       int
		budget       time.Duration
		batch        int
		redis, steps string
	)
	cmd := &cobra.Command{
		Use:   "bench [--scale] [--quick] [--rounds N] [--budget D] [--batch N] [--redis ADDR] [--steps S] [--json]",
		Short: "Benchmark fence against the database's own floor",
		Long:  benchLong,
		Example: `  fence bench --dsn postgres://postgres@127.0.0.1:5432/test
  fence bench --dsn mysql://root@127.0.0.1:3306/test --scale --json > mariadb.json`,
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
			cfg := bench.Config{Rounds: rounds, Budget: budget, Batch: batch, Redis: redis, Scale: scale, Log: a.stderr}
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
	f.StringVar(&redis, "redis", "127.0.0.1:6379", "Redis `address` for the Redis-lock alternative; empty leaves it out")
	return cmd
}
