package cli

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fencekit/fence"
)

const releaseLong = `Revoke a lease: bump its fence and clear its owner, so that its current
holder becomes stale at once. From then on the holder's renewals, fenced
writes and fenced completion are refused by the database; a holder that is a
'fence run' notices at its next renewal (within a third of its TTL), stops its
command (SIGTERM, then SIGKILL) and exits 76. The lease is free for the next
acquisition, which gets a higher fence still.

A holder releases its own lease when its run ends; releasing someone else's
is always a revoke, hence the name (it was 'fence release --force', which
still works). On a terminal, fence asks for confirmation unless --yes is
given.

With --json it prints {"lease", "fence", "previous_fence", "previous_state",
"previous_owner", "previous_holder"}: fence is the new fence; the revoked
lease has no holder any more (its runs keep the name).`

// revokeCmd is 'fence revoke NAME'.
func (a *app) revokeCmd() *cobra.Command {
	return a.revokeLike("revoke NAME [--yes]", false)
}

// releaseCmd is the old spelling, 'fence release NAME --force': hidden,
// and --force still required, so that no script that omitted it starts
// revoking.
func (a *app) releaseCmd() *cobra.Command {
	cmd := a.revokeLike("release NAME --force [--yes]", true)
	cmd.Hidden = true
	cmd.Deprecated = "use 'fence revoke NAME': releasing someone else's lease is a revoke"
	return cmd
}

func (a *app) revokeLike(use string, needForce bool) *cobra.Command {
	var force, yes bool
	verb := strings.Fields(use)[0]
	cmd := &cobra.Command{
		Use:   use,
		Short: "Revoke a lease so that its current holder becomes stale",
		Long:  releaseLong,
		Example: `  fence revoke nightly-report
  fence revoke nightly-report --yes   # no prompt, for scripts`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("see 'fence "+verb+" --help'", "%s takes exactly one lease name, got %d arguments", verb, len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := fence.ValidateName(name); err != nil {
				return usagef("a lease name is 1 to 191 bytes of printable UTF-8: no control or formatting characters", "%v", err)
			}
			if needForce && !force {
				return usagef("use 'fence revoke "+name+"'; a holder releases its own lease when its run ends",
					"release of lease %s needs --force: only its holder can release it normally", quoteName(name))
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			s, err := a.open(ctx, true)
			if err != nil {
				return err
			}
			defer s.Close()
			before, err := s.Get(ctx, name)
			if errors.Is(err, fence.ErrNotFound) {
				return fail(ExitFailure, fmt.Errorf("no lease named %s", quoteName(name)), "'fence leases' lists the leases")
			}
			if err != nil {
				return err
			}
			if !yes && isTerminal(a.stdin) {
				ok, err := a.confirm(before)
				if err != nil {
					return err
				}
				if !ok {
					return fail(ExitFailure, errors.New("not confirmed; nothing changed"), "answer y, or pass --yes")
				}
			}
			f, err := s.Revoke(ctx, name)
			if err != nil {
				return err
			}
			if a.json {
				return writeJSON(a.stdout, struct {
					Lease          string `json:"lease"`
					Fence          int64  `json:"fence"`
					PreviousFence  int64  `json:"previous_fence"`
					PreviousState  string `json:"previous_state"`
					PreviousOwner  string `json:"previous_owner"`
					PreviousHolder string `json:"previous_holder"`
				}{name, f, before.Fence, string(before.State), before.Owner, before.Holder})
			}
			msg := fmt.Sprintf("revoked lease %s: fence is now %d", quoteName(name), f)
			if before.State == fence.StateHeld {
				msg += fmt.Sprintf("; its holder %s (fence %d) can no longer renew, write or complete", holderText(before.Holder), before.Fence)
			} else {
				msg += fmt.Sprintf(" (it was %s at fence %d)", before.State, before.Fence)
			}
			_, err = fmt.Fprintln(a.stdout, msg)
			return err
		},
	}
	if needForce {
		cmd.Flags().BoolVar(&force, "force", false, "revoke the lease whoever holds it (required)")
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation on a terminal")
	return cmd
}

// confirm asks on stderr and reads the answer from stdin.
func (a *app) confirm(l fence.LeaseInfo) (bool, error) {
	what := fmt.Sprintf("lease %s (%s, fence %d", quoteName(l.Name), l.State, l.Fence)
	if l.State == fence.StateHeld {
		what += fmt.Sprintf(", held by %s, expires in %s", holderText(l.Holder), human(l.Remaining))
	}
	what += ")"
	fmt.Fprintf(a.stderr, "Revoke %s? Its holder's renewals and fenced writes will be refused. [y/N] ", what)
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
