package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// demoItems: three owners are wrong (#2, #3, #5).
var demoItems = []item{
	{1, "alice", "alice"},
	{2, "bob", "carol"},
	{3, "dave", "erin"},
	{4, "frank", "frank"},
	{5, "grace", "heidi"},
	{6, "judy", "judy"},
}

// timeline prints events with the time since the story began.
type timeline struct {
	w     io.Writer
	start time.Time
}

func (tl timeline) say(who, format string, args ...any) {
	fmt.Fprintf(tl.w, "+%.2fs %s %s\n", time.Since(tl.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// demo plays the article's story with two workers in one process: A
// acquires and scans, stalls past its TTL, B takes over and completes, and A
// resumes to find every write it tries refused by the database.
//
// A is driven step by step through the store API, not fence.Run: the
// runner renews from its own goroutine, so an in-process pause of A's job
// alone would never let the lease lapse. A stalled process stops renewing
// too; the SIGSTOP test shows that with the runner across real processes.
func demo(ctx context.Context, w io.Writer, dsn, prefix string, ttl time.Duration) error {
	if dsn == "" {
		dir, err := os.MkdirTemp("", "fence-reconcile-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dsn = "sqlite:" + filepath.Join(dir, "reconcile.db")
	}
	d, err := fencedsn.Parse(dsn)
	if err != nil {
		return err
	}
	// One store each, as two replicas would have.
	sa, err := fencedsn.Open(ctx, dsn, fence.WithPrefix(prefix))
	if err != nil {
		return err
	}
	defer sa.Close()
	sb, err := fencedsn.Open(ctx, dsn, fence.WithPrefix(prefix))
	if err != nil {
		return err
	}
	defer sb.Close()
	if _, err := sa.Migrate(ctx); err != nil {
		return err
	}
	ra, rb := newReconciler(sa), newReconciler(sb)
	if err := ra.setup(ctx); err != nil {
		return err
	}
	if err := ra.seed(ctx, demoItems); err != nil {
		return err
	}
	fmt.Fprintf(w, "reconcile: two workers, one lease %q, on %s\n\n", leaseName, d.Redacted)

	tl := timeline{w: w, start: time.Now()}
	// Waiting, not failing, if the lease is held: an interrupted earlier run
	// on the same database may have left it to lapse.
	la, err := sa.AcquireWait(ctx, leaseName, ttl)
	if err != nil {
		return err
	}
	a := la.Token
	idA, err := sa.StartRun(ctx, a, nil)
	if err != nil {
		return err
	}
	tl.say("A", "acquired %s fence %d (ttl %v), run %d", leaseName, a.Fence, ttl, idA)
	fixes, scanned, err := ra.scan(ctx)
	if err != nil {
		return err
	}
	tl.say("A", "scanned %d items: %d to fix (%s)", scanned, len(fixes), joinFixes(fixes))
	tl.say("A", "pauses (GC/VM stall): no renewals, no writes")

	// The world moves on while A is frozen, so A's scan goes stale: a write
	// from it now would undo this change.
	if err := ra.expect(ctx, 3, "ivan"); err != nil {
		return err
	}
	tl.say("-", "meanwhile item #3 is handed over: expected owner erin -> ivan")

	var sumB summary
	resB, err := fence.Run(ctx, sb, leaseName, rb.job(&sumB),
		fence.WithTTL(10*time.Second), fence.WithWait(),
		fence.OnStarted(func(ctx context.Context, t fence.Token) {
			id, _ := fence.RunIDFrom(ctx)
			tl.say("B", "acquired fence %d once A's lease lapsed by the database clock, run %d", t.Fence, id)
		}))
	if err != nil {
		return err
	}
	if resB.Outcome != fence.Completed {
		return fmt.Errorf("worker B did not complete: %s: %v", resB.Outcome, firstErr(resB.Err, resB.JobErr))
	}
	tl.say("B", "fixed %d items, report written, completed", sumB.Fixed)

	// A carries on from where it stopped, as a stalled worker does: it has
	// no idea that time passed. Every write it makes carries its old fence.
	now, err := ra.listItems(ctx)
	if err != nil {
		return err
	}
	for i, f := range fixes {
		err := ra.apply(ctx, a, f)
		if !errors.Is(err, fence.ErrLost) {
			return fmt.Errorf("worker A's stale write %s was not refused as lost: %v", f, err)
		}
		harm := ""
		for _, it := range now {
			if it.ID == f.ID && it.Owner != f.To {
				harm = fmt.Sprintf("; unfenced, it would have overwritten B's %s with %s", it.Owner, f.To)
			}
		}
		if i == 0 {
			tl.say("A", "resumes; fenced write %s rejected: %v%s", f, err, harm)
		} else {
			tl.say("A's", "fenced write %s rejected too%s", f, harm)
		}
	}
	if err := ra.writeReport(ctx, a, idA, fixes); !errors.Is(err, fence.ErrLost) {
		return fmt.Errorf("worker A's stale report was not refused as lost: %v", err)
	}
	tl.say("A's", "fenced report rejected")
	err = sa.FinishRun(ctx, a, idA, fence.Completion{Result: summary{Scanned: scanned, Fixed: len(fixes), Reported: true, Fence: a.Fence, RunID: idA}})
	if !errors.Is(err, fence.ErrLost) {
		return fmt.Errorf("worker A's stale completion was not refused as lost: %v", err)
	}
	tl.say("A's", "completion rejected: zero rows: %v", err)

	fmt.Fprintln(w)
	return printTables(ctx, w, ra, idA, resB.RunID)
}

func joinFixes(fixes []fix) string {
	s := make([]string, len(fixes))
	for i, f := range fixes {
		s[i] = f.String()
	}
	return strings.Join(s, ", ")
}

// printTables shows the end state: B's fixes and report only, and the runs
// as the ledger recorded them.
func printTables(ctx context.Context, w io.Writer, r *reconciler, runIDs ...int64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	items, err := r.listItems(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(tw, "%s\tid\towner\texpected_owner\n", r.items)
	for _, it := range items {
		fmt.Fprintf(tw, "\t%d\t%s\t%s\n", it.ID, it.Owner, it.Expected)
	}
	fmt.Fprintln(tw)
	reps, err := r.listReports(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(tw, "%s\trun_id\tfence\tfixed_count\tbody\n", r.reports)
	for _, p := range reps {
		fmt.Fprintf(tw, "\t%d\t%d\t%d\t%s\n", p.RunID, p.Fence, p.Fixed, strings.ReplaceAll(p.Body, "\n", ", "))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "%sruns\trun_id\tfence\tstatus\tresult or error\n", r.store.Prefix())
	for _, id := range runIDs {
		ri, err := r.store.GetRun(ctx, id)
		if err != nil {
			return err
		}
		detail := ri.Error
		if ri.Status == fence.RunSucceeded {
			detail = string(ri.Result)
		}
		fmt.Fprintf(tw, "\t%d\t%d\t%s\t%s\n", ri.ID, ri.Fence, ri.Status, detail)
	}
	return tw.Flush()
}
