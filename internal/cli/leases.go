package cli

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/fencekit/fence"
)

// leaseJSON is one element of `fence leases --json`. The field set is
// stable: fields may be added, never renamed or removed.
type leaseJSON struct {
	Name        string  `json:"name"`
	State       string  `json:"state"`
	Owner       string  `json:"owner"`
	Holder      string  `json:"holder"`
	Fence       int64   `json:"fence"`
	ExpiresAt   *string `json:"expires_at"`
	ExpiresInMs *int64  `json:"expires_in_ms"`
	AcquiredAt  *string `json:"acquired_at"`
	UpdatedAt   *string `json:"updated_at"`
	DBNow       *string `json:"db_now"`
}

// leaseToJSON converts l; the owner token only with showTokens, since it is
// the capability to renew or release the lease.
func leaseToJSON(l fence.LeaseInfo, showTokens bool) leaseJSON {
	j := leaseJSON{
		Name:       l.Name,
		State:      string(l.State),
		Owner:      shownToken(l.Owner, showTokens),
		Holder:     l.Holder,
		Fence:      l.Fence,
		ExpiresAt:  jsonTime(l.ExpiresAt),
		AcquiredAt: jsonTime(l.AcquiredAt),
		UpdatedAt:  jsonTime(l.UpdatedAt),
		DBNow:      jsonTime(l.DBNow),
	}
	if !l.ExpiresAt.IsZero() {
		ms := l.ExpiresAt.Sub(l.DBNow).Milliseconds()
		j.ExpiresInMs = &ms
	}
	return j
}

const leasesLong = `List every lease with its state by the database clock:

  held      valid until EXPIRES IN from now (database time)
  expired   its holder stopped renewing; the next acquire takes it over
  released  its holder gave it up
  revoked   an operator ran 'fence revoke' or 'fence raise-fences';
            the holder is stale

HOLDER names the owner of the last acquisition as it called itself ('fence
run --holder', the library's WithHolder; by default host:pid of the process
that acquired it): "-" after a revoke, "(unnamed)" for a lease last acquired
by a fence that did not record names. It is a label, not a proof: the owner
token (FENCE_OWNER in the command's environment, "owner" in --json with
--show-tokens) is the secret that proves an acquisition, and whoever has it
can renew or release the lease. FENCE is the fence of that acquisition,
which only ever increases. A new fence is at least the database
clock in microseconds, so that fences never repeat even after a restore
(docs/adr/0004-fence-floor.md): they are 16-digit numbers, shown in full
because they are what tokens, logs and errors carry; compare them by order.

--json prints an array (empty: []) of objects with these fields:

  name           string   the lease name
  state          string   held | expired | released | revoked
  owner          string   full owner token of the last acquisition, only with
                          --show-tokens; "hidden" without it, "" after a revoke
  holder         string   the name of that acquisition's owner ("" after a
                          revoke, and when none was recorded)
  fence          integer  fence of the last acquisition (or revoke)
  expires_at     string   RFC 3339 UTC, milliseconds; null when released or revoked
  expires_in_ms  integer  expires_at minus db_now: negative once expired; null
                          when released or revoked
  acquired_at    string   database time of the last acquisition
  updated_at     string   database time of the last change
  db_now         string   the database clock when the row was read

Fields may be added in later versions; none is renamed or removed.`

func (a *app) leasesCmd() *cobra.Command {
	var showTokens bool
	cmd := &cobra.Command{
		Use:   "leases [--json [--show-tokens]]",
		Short: "List leases: state, holder, fence, expiry",
		Long:  leasesLong,
		Example: `  fence leases
  fence leases --json | jq -r '.[] | select(.state == "held") | .name'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			s, err := a.open(ctx, true)
			if err != nil {
				return err
			}
			defer s.Close()
			ls, err := s.List(ctx)
			if err != nil {
				return err
			}
			if a.json {
				out := make([]leaseJSON, len(ls))
				for i, l := range ls {
					out[i] = leaseToJSON(l, showTokens)
				}
				return writeJSON(a.stdout, out)
			}
			return a.leasesTable(a.stdout, ls)
		},
	}
	cmd.Flags().BoolVar(&showTokens, "show-tokens", false, "with --json, print each holder's owner token (the capability to renew or release its lease) instead of \"hidden\"")
	return cmd
}

// hiddenToken stands for an owner token in --json output without
// --show-tokens: a token is the capability to renew or release a lease, and
// listings end up in logs, tickets and terminals shared on screen.
const hiddenToken = "hidden"

// shownToken is tok, or hiddenToken unless show ("" stays "": no owner).
func shownToken(tok string, show bool) string {
	if show || tok == "" {
		return tok
	}
	return hiddenToken
}

func (a *app) leasesTable(w io.Writer, ls []fence.LeaseInfo) error {
	t := newTable(w, a.color(), 1, stateColor, "NAME", "STATE", "HOLDER", "FENCE", "EXPIRES IN")
	for _, l := range ls {
		t.row(l.Name, string(l.State), holderCell(l.Holder, l.State), itoa(l.Fence), expiresIn(l))
	}
	return t.flush()
}

// expiresIn is the EXPIRES IN cell: time left by the database clock, how
// long ago it expired, or "-" when there is no expiry.
func expiresIn(l fence.LeaseInfo) string {
	switch {
	case l.ExpiresAt.IsZero():
		return "-"
	case l.State == fence.StateHeld:
		return human(l.Remaining)
	default:
		return human(l.DBNow.Sub(l.ExpiresAt)) + " ago"
	}
}
