package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencekit/fence"
)

// leaseName is the singleton job's lease, named as in the article.
const leaseName = "admin:reconciliation"

// item is a row of the items table: who owns it and who should.
type item struct {
	ID       int64
	Owner    string
	Expected string
}

// fix is one mismatch found by a scan. To is the expected owner as the scan
// read it: a worker that stalls between scan and write would write a value
// that may have gone stale, which is exactly the write the fence must stop.
type fix struct {
	ID       int64
	From, To string
}

func (f fix) String() string { return fmt.Sprintf("#%d %s->%s", f.ID, f.From, f.To) }

// summary is what a reconciliation did. It is stored as the run's result and
// counts only writes that committed, so a stale worker can say truthfully
// that it committed nothing.
type summary struct {
	Scanned  int   `json:"scanned"`
	Fixed    int   `json:"fixed"`
	Skipped  int   `json:"skipped,omitempty"`
	Reported bool  `json:"reported"`
	Fence    int64 `json:"fence"`
	RunID    int64 `json:"run_id"`
}

// committed says whether any write of the run reached the database.
func (s summary) committed() bool { return s.Fixed > 0 || s.Reported }

// reconciler is the article's OwnerReconciler: it scans items for owners
// that differ from the expected owner, fixes each with a fenced UPDATE and
// writes a report with a fenced INSERT, under the admin:reconciliation
// lease. Its tables live next to fence's, under the store's prefix.
type reconciler struct {
	store          *fence.Store
	items, reports string
	batch          int

	// pause, when set, runs between the scan and the first write. The demo
	// and the tests stall a worker there, where a GC pause, a VM freeze or a
	// slow downstream call would hit a real one.
	pause func(ctx context.Context, fixes []fix)

	// heedless makes the writes ignore the job's cancellation, as a job
	// blocked in a call that takes no context (or already past its last
	// check) would: then only the fence at the database stops a stale write.
	heedless bool
}

func newReconciler(s *fence.Store) *reconciler {
	return &reconciler{store: s, items: s.Prefix() + "items", reports: s.Prefix() + "reports", batch: 100}
}

// sql turns the ? placeholders of q into $1, $2, … on PostgreSQL. The
// statements here have no '?' inside literals, so a plain scan is enough.
func (r *reconciler) sql(q string) string {
	if r.store.Dialect() != fence.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// setup creates the tables if they are missing. The types are the portable
// subset that SQLite, PostgreSQL and MySQL/MariaDB read alike.
func (r *reconciler) setup(ctx context.Context) error {
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS " + r.items + " (id BIGINT PRIMARY KEY, owner VARCHAR(64) NOT NULL, expected_owner VARCHAR(64) NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + r.reports + " (run_id BIGINT PRIMARY KEY, fence BIGINT NOT NULL, fixed_count INT NOT NULL, body TEXT NOT NULL)",
	} {
		if _, err := r.store.DB().ExecContext(ctx, q); err != nil {
			return fmt.Errorf("reconcile: creating tables: %w", err)
		}
	}
	return nil
}

// drop removes the example's tables.
func (r *reconciler) drop(ctx context.Context) error {
	for _, t := range []string{r.items, r.reports} {
		if _, err := r.store.DB().ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
			return err
		}
	}
	return nil
}

// seed replaces the items and clears the reports. It is setup for demos and
// tests, not part of the job, so it is not fenced.
func (r *reconciler) seed(ctx context.Context, items []item) error {
	db := r.store.DB()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range []string{"DELETE FROM " + r.items, "DELETE FROM " + r.reports} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("reconcile: seeding: %w", err)
		}
	}
	ins := r.sql("INSERT INTO " + r.items + " (id, owner, expected_owner) VALUES (?, ?, ?)")
	for _, it := range items {
		if _, err := tx.ExecContext(ctx, ins, it.ID, it.Owner, it.Expected); err != nil {
			return fmt.Errorf("reconcile: seeding item %d: %w", it.ID, err)
		}
	}
	return tx.Commit()
}

// expect changes an item's expected owner: an ownership transfer made by
// someone else while the job runs.
func (r *reconciler) expect(ctx context.Context, id int64, owner string) error {
	_, err := r.store.DB().ExecContext(ctx, r.sql("UPDATE "+r.items+" SET expected_owner = ? WHERE id = ?"), owner, id)
	return err
}

// listItems returns every item in id order.
func (r *reconciler) listItems(ctx context.Context) ([]item, error) {
	rows, err := r.store.DB().QueryContext(ctx, "SELECT id, owner, expected_owner FROM "+r.items+" ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []item
	for rows.Next() {
		var it item
		if err := rows.Scan(&it.ID, &it.Owner, &it.Expected); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// report is a row of the reports table.
type report struct {
	RunID int64
	Fence int64
	Fixed int
	Body  string
}

// listReports returns every report in run order.
func (r *reconciler) listReports(ctx context.Context) ([]report, error) {
	rows, err := r.store.DB().QueryContext(ctx, "SELECT run_id, fence, fixed_count, body FROM "+r.reports+" ORDER BY run_id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []report
	for rows.Next() {
		var p report
		if err := rows.Scan(&p.RunID, &p.Fence, &p.Fixed, &p.Body); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// scan reads the items in batches by id and returns the mismatches. Reads
// need no fence: only writes can do a stale worker's damage.
func (r *reconciler) scan(ctx context.Context) (fixes []fix, scanned int, err error) {
	q := r.sql("SELECT id, owner, expected_owner FROM " + r.items + " WHERE id > ? ORDER BY id LIMIT ?")
	var after int64
	for {
		rows, err := r.store.DB().QueryContext(ctx, q, after, r.batch)
		if err != nil {
			return nil, scanned, fmt.Errorf("reconcile: scanning: %w", err)
		}
		n := 0
		for rows.Next() {
			var it item
			if err := rows.Scan(&it.ID, &it.Owner, &it.Expected); err != nil {
				rows.Close()
				return nil, scanned, fmt.Errorf("reconcile: scanning: %w", err)
			}
			n++
			after = it.ID
			if it.Owner != it.Expected {
				fixes = append(fixes, fix{ID: it.ID, From: it.Owner, To: it.Expected})
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, scanned, fmt.Errorf("reconcile: scanning: %w", err)
		}
		scanned += n
		if n < r.batch {
			return fixes, scanned, nil
		}
	}
}

// apply writes one fix, fenced: the owner is set only if t still holds the
// lease at the moment of the write, by the database clock. A stale worker
// gets an error wrapping fence.ErrLost and changes nothing; an item deleted
// since the scan gives fence.ErrNoMatch.
func (r *reconciler) apply(ctx context.Context, t fence.Token, f fix) error {
	_, err := r.store.Exec(ctx, t, r.sql("UPDATE "+r.items+" SET owner = ? WHERE id = ? AND {{fence}}"), f.To, f.ID)
	return err
}

// writeReport inserts the run's report, fenced the same way. INSERT …
// VALUES cannot carry a WHERE, so the row comes from a SELECT that yields
// it only while t holds the lease.
func (r *reconciler) writeReport(ctx context.Context, t fence.Token, runID int64, fixes []fix) error {
	from := ""
	if r.store.Dialect() == fence.MySQL {
		from = " FROM DUAL" // MySQL accepts WHERE after a table-less SELECT only with FROM DUAL
	}
	_, err := r.store.Exec(ctx, t,
		r.sql("INSERT INTO "+r.reports+" (run_id, fence, fixed_count, body) SELECT ?, ?, ?, ?"+from+" WHERE {{fence}}"),
		runID, t.Fence, len(fixes), reportBody(fixes))
	return err
}

func reportBody(fixes []fix) string {
	if len(fixes) == 0 {
		return "no mismatches"
	}
	lines := make([]string, len(fixes))
	for i, f := range fixes {
		lines[i] = f.String()
	}
	return strings.Join(lines, "\n")
}

// reconcile is one whole reconciliation under token t and run runID: scan,
// pause (if set), fix, report. It stops at the first lost-lease error, since
// no later write of the same token can succeed. The summary counts what
// committed even when it returns an error.
func (r *reconciler) reconcile(ctx context.Context, t fence.Token, runID int64) (summary, error) {
	sum := summary{Fence: t.Fence, RunID: runID}
	fixes, scanned, err := r.scan(ctx)
	sum.Scanned = scanned
	if err != nil {
		return sum, err
	}
	if r.pause != nil {
		r.pause(ctx, fixes)
	}
	wctx := ctx
	if r.heedless {
		wctx = context.WithoutCancel(ctx)
	}
	var done []fix
	for _, f := range fixes {
		if !r.heedless && ctx.Err() != nil {
			// The runner has given up on the lease; stopping here is only
			// courtesy, the fence would refuse the write anyway.
			return sum, context.Cause(ctx)
		}
		switch err := r.apply(wctx, t, f); {
		case errors.Is(err, fence.ErrNoMatch):
			sum.Skipped++ // deleted since the scan: nothing to reconcile
		case err != nil:
			return sum, fmt.Errorf("reconcile: fixing item %d: %w", f.ID, err)
		default:
			sum.Fixed++
			done = append(done, f)
		}
	}
	if !r.heedless && ctx.Err() != nil {
		return sum, context.Cause(ctx)
	}
	if err := r.writeReport(wctx, t, runID, done); err != nil {
		return sum, fmt.Errorf("reconcile: writing report: %w", err)
	}
	sum.Reported = true
	return sum, nil
}

// job is the reconciliation as a fence.Job. fence.Run supplies the token and
// run id and, after the job returns, records the summary with the fenced
// completion; out receives the summary either way, for the caller to report.
func (r *reconciler) job(out *summary) fence.Job {
	return func(ctx context.Context) error {
		t, _ := fence.TokenFrom(ctx)
		id, _ := fence.RunIDFrom(ctx)
		sum, err := r.reconcile(ctx, t, id)
		if out != nil {
			*out = sum
		}
		fence.SetResult(ctx, sum)
		return err
	}
}
