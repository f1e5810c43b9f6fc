package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/ops"
)

// runJSON is one element of `fence runs --json`. The field set is stable:
// fields may be added, never renamed or removed.
type runJSON struct {
	ID         int64           `json:"id"`
	Kind       string          `json:"kind"`
	Lease      string          `json:"lease"`
	Owner      string          `json:"owner"`
	Holder     string          `json:"holder"`
	Fence      int64           `json:"fence"`
	Status     string          `json:"status"`
	StartedAt  *string         `json:"started_at"`
	FinishedAt *string         `json:"finished_at"`
	DurationMs *int64          `json:"duration_ms"`
	ExitCode   *int            `json:"exit_code"`
	Error      *string         `json:"error"`
	Result     json.RawMessage `json:"result"`
}

func runToJSON(r fence.RunInfo, showTokens bool) runJSON {
	j := runJSON{
		ID:         r.ID,
		Kind:       "run",
		Lease:      r.Lease,
		Owner:      shownToken(r.Owner, showTokens),
		Holder:     r.Holder,
		Fence:      r.Fence,
		Status:     string(r.Status),
		StartedAt:  jsonTime(r.StartedAt),
		FinishedAt: jsonTime(r.FinishedAt),
		ExitCode:   r.ExitCode,
		Result:     r.Result,
	}
	if !r.FinishedAt.IsZero() {
		ms := r.Duration().Milliseconds()
		j.DurationMs = &ms
	}
	if r.Error != "" {
		e := r.Error
		j.Error = &e
	}
	if r.IsTerm() {
		j.Kind = "term"
	}
	if len(j.Result) == 0 {
		j.Result = json.RawMessage("null")
	}
	return j
}

var runStatuses = []fence.RunStatus{fence.RunRunning, fence.RunSucceeded, fence.RunFailed, fence.RunLost, fence.RunAbandoned}

const runsLong = `List the run ledger, newest first: every 'fence run' (and every job run by
the library's Run) records a run when it starts and finishes it with fenced
completion. STATUS is one of

  running    still running, or its worker died without noticing (see below)
  succeeded  finished with exit status 0, completion accepted
  failed     finished with a non-zero exit status, completion accepted
  lost       its worker lost the lease, or its completion was rejected as stale
  abandoned  a newer owner of the same lease started a run while it was running
             (its end is when its worker stopped, if the worker said so
             afterwards: "completion refused" or "stopped late" in its error)

The library's Elect records each term of leadership here too, as a run of
kind "term": its holder led from its start to its end with its fence.

HOLDER is the name the run's lease owner went by ('fence run --holder', by
default host:pid of the fence process), kept when the lease changes hands
or is revoked. A stale worker can never move a run to succeeded or failed:
that write is fenced by the lease.

--json prints an array (empty: []) of objects with these fields:

  id           integer  run id, increasing
  kind         string   run | term (a term of leadership, see above)
  lease        string   lease name
  owner        string   full owner token of the acquisition the run belongs
                        to, only with --show-tokens ("hidden" without it)
  holder       string   the name of that acquisition's owner ("" when none
                        was recorded)
  fence        integer  fence of that acquisition
  status       string   running | succeeded | failed | lost | abandoned
  started_at   string   RFC 3339 UTC, milliseconds, database time
  finished_at  string   same format; null while running
  duration_ms  integer  finished_at minus started_at; null while running
  exit_code    integer  the command's exit status; null when none was recorded
  error        string   why it failed or was lost; null when none
  result       any      JSON detail stored with the run ('fence run' stores
                        {"command", "host", "pid"}); null when none

Fields may be added in later versions; none is renamed or removed.`

func (a *app) runsCmd() *cobra.Command {
	var (
		lease      string
		status     string
		limit      int
		showTokens bool
	)
	cmd := &cobra.Command{
		Use:   "runs [--lease NAME] [--status S] [--limit N]",
		Short: "List run history, newest first",
		Long:  runsLong,
		Example: `  fence runs
  fence runs --lease nightly-report --limit 5
  fence runs --status lost --json | jq '.[].error'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := fence.RunFilter{Lease: lease, Status: fence.RunStatus(status), Limit: limit}
			if cmd.Flags().Changed("lease") {
				if err := fence.ValidateName(lease); err != nil {
					return usagef("a lease name is 1 to 191 bytes of printable UTF-8: no control or formatting characters", "--lease: %v", err)
				}
			}
			if status != "" && !validStatus(f.Status) {
				return usagef("use running, succeeded, failed, lost or abandoned", "unknown --status %q", clip(status))
			}
			if limit < 0 {
				return usagef("--limit 0 lists every run", "--limit %d is negative", limit)
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			s, err := a.open(ctx, true)
			if err != nil {
				return err
			}
			defer s.Close()
			rs, err := s.Runs(ctx, f)
			if err != nil {
				return err
			}
			rs = ops.SettleRunning(ctx, s, rs)
			if a.json {
				out := make([]runJSON, len(rs))
				for i, r := range rs {
					out[i] = runToJSON(r, showTokens)
				}
				return writeJSON(a.stdout, out)
			}
			var now time.Time
			for _, r := range rs {
				if r.Status == fence.RunRunning {
					if now, err = s.Now(ctx); err != nil {
						return err
					}
					break
				}
			}
			return a.runsTable(a.stdout, rs, now)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&lease, "lease", "", "only runs of lease `NAME`")
	fl.StringVar(&status, "status", "", "only runs with status `S`: running, succeeded, failed, lost or abandoned")
	fl.IntVar(&limit, "limit", 20, "at most `N` runs (0: all)")
	fl.BoolVar(&showTokens, "show-tokens", false, "with --json, print each run's owner token (while its lease is held, the capability to renew or release it) instead of \"hidden\"")
	cmd.AddCommand(a.runsPruneCmd())
	return cmd
}

func (a *app) runsPruneCmd() *cobra.Command {
	var (
		lease     string
		olderThan time.Duration
	)
	cmd := &cobra.Command{
		Use:   "prune --older-than DURATION [--lease NAME]",
		Short: "Delete finished runs older than a retention",
		Long: `Delete the finished runs (succeeded, failed, lost, abandoned) that finished
more than DURATION ago by the database clock, of one lease or of all.
Running runs are never deleted. Prints how many runs were deleted
(--json: {"deleted": N}).`,
		Example: `  fence runs prune --older-than 720h
  fence runs prune --older-than 24h --lease nightly-report`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("older-than") {
				return usagef("for example --older-than 720h keeps 30 days", "--older-than is required")
			}
			if olderThan < time.Millisecond {
				return usagef("for example --older-than 720h keeps 30 days", "--older-than %v must be positive", olderThan)
			}
			if cmd.Flags().Changed("lease") {
				if err := fence.ValidateName(lease); err != nil {
					return usagef("a lease name is 1 to 191 bytes of printable UTF-8: no control or formatting characters", "--lease: %v", err)
				}
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			s, err := a.open(ctx, true)
			if err != nil {
				return err
			}
			defer s.Close()
			n, err := s.PruneRuns(ctx, lease, olderThan)
			if err != nil {
				return err
			}
			if a.json {
				return writeJSON(a.stdout, map[string]int64{"deleted": n})
			}
			_, err = fmt.Fprintf(a.stdout, "deleted %d finished run(s) older than %v\n", n, olderThan)
			return err
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&olderThan, "older-than", 0, "delete runs that finished more than `DURATION` ago (e.g. 720h)")
	fl.StringVar(&lease, "lease", "", "only runs of lease `NAME`")
	return cmd
}

func validStatus(s fence.RunStatus) bool {
	for _, v := range runStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// runsTable prints runs; dbNow, when set, times the running ones.
func (a *app) runsTable(w io.Writer, rs []fence.RunInfo, dbNow time.Time) error {
	t := newTable(w, a.color(), 3, stateColor, "ID", "LEASE", "FENCE", "STATUS", "HOLDER", "STARTED", "DURATION", "EXIT", "ERROR")
	for _, r := range rs {
		dur := "-"
		switch {
		case !r.FinishedAt.IsZero():
			dur = human(r.Duration())
		case !dbNow.IsZero():
			dur = human(dbNow.Sub(r.StartedAt)) + "…"
		}
		exit := "-"
		if r.ExitCode != nil {
			exit = strconv.Itoa(*r.ExitCode)
		}
		holder := r.Holder
		if holder == "" {
			holder = unnamed
		}
		t.row(itoa(r.ID), r.Lease, itoa(r.Fence), string(r.Status), holder, tableTime(r.StartedAt), dur, exit, clip(oneLine(r.Error)))
	}
	return t.flush()
}
