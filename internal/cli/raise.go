package cli

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fencekit/fence"
)

const raiseLong = `After the database went back in time — a restore from a backup, or the
promotion of an asynchronous replica that missed the last commits — raise
every lease's fence past a floor and revoke its holder, in one transaction.

Why: fences already handed out before the rollback are still in use outside
the database (rows guarded by ExecResource, Fence-Token headers, a holder
that is still running). Every new fence is at least the database clock in
microseconds, so the next acquisitions stay above them as long as the
clock of the restored or promoted server is ahead of the clock at the last
lost acquisition. What no floor on new fences fixes is the restored table
itself: it may show a lease as held by a token that was superseded before
the rollback. raise-fences revokes those holders: their renewals, fenced
writes and completions are refused from now on, and 'fence run' holders
stop their commands within a third of their TTL.

The floor is the database clock in microseconds, or --to N when that clock
cannot be trusted to be ahead (a server whose clock was set back, a replica
on a host with a skewed clock): use a value above every fence you know was
handed out, e.g. the time of the restore in microseconds plus a margin.
Leases whose fence is already at or above the floor are left alone; a lease
the restored table has no row for gets the clock floor at its first
acquisition. Run it before restarting the workers, or with them running:
either way every holder of a lease it raises has to acquire again.

--force is required; on a terminal fence asks for confirmation unless --yes
is given. With --json it prints {"floor", "raised": [{"lease", "fence",
"previous_fence", "previous_state", "previous_owner", "previous_holder"}]}.

See docs/RUNBOOK.md, "After a restore or a replica promotion".`

func (a *app) raiseFencesCmd() *cobra.Command {
	var (
		force, yes bool
		to         string
	)
	cmd := &cobra.Command{
		Use:   "raise-fences --force [--to N] [--yes]",
		Short: "After a restore: raise every fence past a floor and revoke the holders",
		Long:  raiseLong,
		Example: `  fence raise-fences --force                      # floor: the database clock in µs
  fence raise-fences --force --to 1796400000000000 --yes`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			floor, err := parseFloor(to)
			if err != nil {
				return err
			}
			if !force {
				return usagef("add --force: every holder of a raised lease is revoked",
					"raise-fences revokes the holders of every lease it raises and needs --force")
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			s, err := a.open(ctx, true)
			if err != nil {
				return err
			}
			defer s.Close()
			if !yes && isTerminal(a.stdin) {
				ok, err := a.confirmRaise(floor)
				if err != nil {
					return err
				}
				if !ok {
					return fail(ExitFailure, errors.New("not confirmed; nothing changed"), "answer y, or pass --yes")
				}
			}
			r, err := s.RaiseFences(ctx, floor)
			if err != nil {
				return err
			}
			if a.json {
				return writeJSON(a.stdout, raisedToJSON(r))
			}
			return a.raisedTable(r)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "revoke the holder of every raised lease (required)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation on a terminal")
	cmd.Flags().StringVar(&to, "to", "", "the floor `N`, a fence (default: the database clock in microseconds)")
	return cmd
}

// parseFloor reads --to: empty is 0, the database clock. Digits only, as
// a fence in a token is, so that "+5", "1e15" or "0x…" are not guessed at.
func parseFloor(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || s[0] == '+' || s[0] == '0' {
		return 0, usagef("--to takes a fence: a positive decimal integer without sign or leading zeros",
			"--to %q is not a fence", clip(s))
	}
	return n, nil
}

func (a *app) confirmRaise(floor int64) (bool, error) {
	what := "the database clock in microseconds"
	if floor > 0 {
		what = "fence " + itoa(floor)
	}
	fmt.Fprintf(a.stderr, "Raise every fence below %s to it, and revoke every lease raised? Their holders' renewals and fenced writes will be refused. [y/N] ", what)
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(a.stderr)
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

type raisedJSON struct {
	Floor  int64             `json:"floor"`
	Raised []raisedLeaseJSON `json:"raised"`
}

type raisedLeaseJSON struct {
	Lease          string `json:"lease"`
	Fence          int64  `json:"fence"`
	PreviousFence  int64  `json:"previous_fence"`
	PreviousState  string `json:"previous_state"`
	PreviousOwner  string `json:"previous_owner"`
	PreviousHolder string `json:"previous_holder"`
}

func raisedToJSON(r fence.Raised) raisedJSON {
	out := raisedJSON{Floor: r.Floor, Raised: make([]raisedLeaseJSON, len(r.Leases))}
	for i, l := range r.Leases {
		out.Raised[i] = raisedLeaseJSON{l.Name, r.Floor, l.Fence, string(l.State), l.Owner, l.Holder}
	}
	return out
}

func (a *app) raisedTable(r fence.Raised) error {
	if len(r.Leases) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no lease has a fence below %s; nothing changed\n", itoa(r.Floor))
		return err
	}
	held := 0
	for _, l := range r.Leases {
		if l.State == fence.StateHeld {
			held++
		}
	}
	fmt.Fprintf(a.stdout, "raised %d lease(s) to fence %s and revoked them; %d had a holder, who can no longer renew, write or complete\n",
		len(r.Leases), itoa(r.Floor), held)
	t := newTable(a.stdout, a.color(), 1, stateColor, "NAME", "WAS", "HOLDER", "FENCE WAS")
	for _, l := range r.Leases {
		t.row(l.Name, string(l.State), holderCell(l.Holder, l.State), itoa(l.Fence))
	}
	return t.flush()
}
