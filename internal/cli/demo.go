package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

const demoLong = `Replay the story of the article "A Database Lease Is Not Enough" on a
temporary SQLite database, with the real library calls, in a couple of
seconds:

  A acquires the lease (a fence) and starts a run, then pauses; the lease
  expires by the database clock; B acquires it (a higher fence), writes its report
  with a fenced UPDATE and completes its run; A resumes and tries to write its
  own report and complete its run: both are refused (zero rows), and B's
  result is intact.

It prints the timeline as it happens and the final tables. --dsn and
--prefix are ignored: the database is a file in a temporary directory,
removed afterwards.

'fence demo agent' tells the same story for an AI agent's MCP tool calls.`

// demoTTL is A's lease TTL in the demo: long enough to be a real lease,
// short enough that the demo takes a couple of seconds.
const demoTTL = time.Second

func (a *app) demoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "demo",
		Short:   "Replay the stale-worker story on a temporary SQLite database",
		Long:    demoLong,
		Example: `  fence demo`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			dir, err := os.MkdirTemp("", "fence-demo-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if !cmd.Flags().Changed("log-level") {
				// The refusals are the point of the demo, not warnings.
				a.log = slog.New(slog.DiscardHandler)
			}
			return a.demo(ctx, a.stdout, filepath.Join(dir, "demo.db"))
		},
	}
	cmd.AddCommand(a.demoAgentCmd())
	return cmd
}

// demo plays the story; any deviation from it is an error, so the demo is
// also a smoke test of the library on this machine.
func (a *app) demo(ctx context.Context, w io.Writer, path string) error {
	s, err := fencedsn.Open(ctx, "sqlite:"+path, fence.WithLogger(a.log))
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		return err
	}
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE demo_report (id INTEGER PRIMARY KEY, body TEXT NOT NULL, fence INTEGER NOT NULL)`); err != nil {
		return err
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO demo_report VALUES (1, 'no report yet', 0)`); err != nil {
		return err
	}
	const name = "admin:reconciliation"
	const write = `UPDATE demo_report SET body = ?, fence = ? WHERE id = 1 AND {{fence}}`

	start := time.Now()
	step := func(who, format string, args ...any) {
		at := fmt.Sprintf("+%.3fs", time.Since(start).Seconds())
		fmt.Fprintf(w, "  %8s  %-2s %s\n", at, who, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(w, "fence demo: a stale worker on a temporary SQLite database (%s)\n\n", path)

	la, err := s.Acquire(ctx, name, demoTTL)
	if err != nil {
		return err
	}
	ta := la.Token
	step("A", "acquires lease %s for %v: fence %d", name, demoTTL, ta.Fence)
	step("", "(a new fence is at least the database clock in microseconds, so it is never")
	step("", " handed out twice, even after a restore; only the order of fences matters)")
	runA, err := s.StartRun(ctx, ta, nil)
	if err != nil {
		return err
	}
	step("A", "records run %d (running, fence %d) and starts its reconciliation scan", runA, ta.Fence)
	step("A", "pauses: a GC pause, a stopped VM, a partition. It stops renewing and does not know it.")

	// Wait for the expiry by the database clock, not by ours.
	for {
		l, err := s.Get(ctx, name)
		if err != nil {
			return err
		}
		if l.State == fence.StateExpired {
			step("", "the lease expires by the database clock (state %s, fence still %d)", l.State, l.Fence)
			break
		}
		if time.Since(start) > 20*demoTTL {
			return fmt.Errorf("demo: lease %s still %s after %v", name, l.State, time.Since(start))
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}

	lb, err := s.Acquire(ctx, name, 30*time.Second)
	if err != nil {
		return err
	}
	tb := lb.Token
	step("B", "acquires the expired lease: fence %d, higher than A's %d", tb.Fence, ta.Fence)
	runB, err := s.StartRun(ctx, tb, nil)
	if err != nil {
		return err
	}
	ra, err := s.GetRun(ctx, runA)
	if err != nil {
		return err
	}
	step("B", "records run %d (fence %d); A's run %d is now %s", runB, tb.Fence, runA, ra.Status)
	n, err := s.Exec(ctx, tb, write, "B's scan: 3 accounts reconciled", tb.Fence)
	if err != nil {
		return err
	}
	step("B", "writes its report: UPDATE demo_report ... AND {{fence}} -> %d row", n)
	if err := s.FinishRun(ctx, tb, runB, fence.Completion{Result: map[string]int{"reconciled": 3}}); err != nil {
		return err
	}
	step("B", "completes run %d with fenced completion: succeeded", runB)
	if err := s.Release(ctx, tb); err != nil {
		return err
	}
	step("B", "releases the lease")

	step("A", "resumes, unaware, and writes its report with its old token (fence %d)", ta.Fence)
	_, err = s.Exec(ctx, ta, write, "A's scan: 7 accounts reconciled", ta.Fence)
	if !errors.Is(err, fence.ErrLost) {
		return fmt.Errorf("demo: A's stale write was not refused: %v", err)
	}
	step("A", "-> 0 rows: %s", refusal(err))
	err = s.FinishRun(ctx, ta, runA, fence.Completion{})
	if !errors.Is(err, fence.ErrLost) {
		return fmt.Errorf("demo: A's stale completion was not refused: %v", err)
	}
	step("A", "tries to mark run %d succeeded -> 0 rows: %s", runA, refusal(err))

	var body string
	var f int64
	if err := s.DB().QueryRowContext(ctx, `SELECT body, fence FROM demo_report WHERE id = 1`).Scan(&body, &f); err != nil {
		return err
	}
	if f != tb.Fence {
		return fmt.Errorf("demo: the report was written by fence %d, want %d", f, tb.Fence)
	}
	fmt.Fprintf(w, "\nB's result is intact: demo_report says %q (written by fence %d).\n", body, f)
	fmt.Fprintf(w, "The lease decided who could start; the fence decided who could still finish.\n\nleases:\n")
	ls, err := s.List(ctx)
	if err != nil {
		return err
	}
	if err := a.leasesTable(indent(w), ls); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nruns:\n")
	rs, err := s.Runs(ctx, fence.RunFilter{})
	if err != nil {
		return err
	}
	return a.runsTable(indent(w), rs, time.Time{})
}

// refusal is the reason of a refused stale write, without the prefix.
func refusal(err error) string {
	var le *fence.LostError
	if errors.As(err, &le) {
		return describeLost(le) + "; refused"
	}
	return oneLine(err.Error())
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// indent prefixes every line written to w with two spaces.
func indent(w io.Writer) io.Writer { return &indenter{w: w, bol: true} }

type indenter struct {
	w   io.Writer
	bol bool
}

func (i *indenter) Write(p []byte) (int, error) {
	for n, b := range p {
		if i.bol {
			if _, err := io.WriteString(i.w, "  "); err != nil {
				return n, err
			}
		}
		if _, err := i.w.Write([]byte{b}); err != nil {
			return n, err
		}
		i.bol = b == '\n'
	}
	return len(p), nil
}
