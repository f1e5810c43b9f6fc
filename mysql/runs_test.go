package mysql

import (
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fence/internal/driver"
)

func TestRunLedger(t *testing.T) {
	forEachHandle(t, func(t *testing.T, d *Driver) {
		ctx := ctxT(t)
		a := mustAcquire(t, d, "job", "A", 60_000)

		id1, ok, err := d.RunStart(ctx, driver.StartRunParams{Token: a, Detail: `{"step":1}`})
		if err != nil || !ok || id1 <= 0 {
			t.Fatalf("start: %d %v %v", id1, ok, err)
		}
		r, ok, err := d.RunGet(ctx, id1)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		if r.Lease != "job" || r.Owner != "A" || r.Fence != a.Fence || r.Status != driver.RunRunning || r.Result != `{"step":1}` || r.FinishedAtMs != 0 || r.ExitCode != nil || r.StartedAtMs == 0 {
			t.Fatalf("started run %+v", r)
		}
		// A stale or wrong token cannot start a run.
		for _, s := range []driver.TokenParams{{Name: "job", Owner: "B", Fence: a.Fence}, {Name: "job", Owner: "A", Fence: a.Fence + 1}, {Name: "nojob", Owner: "A", Fence: 1}} {
			if id, ok, err := d.RunStart(ctx, driver.StartRunParams{Token: s}); err != nil || ok || id != 0 {
				t.Errorf("start with %+v: %d %v %v", s, id, ok, err)
			}
		}
		id2, ok, err := d.RunStart(ctx, driver.StartRunParams{Token: a})
		if err != nil || !ok {
			t.Fatalf("second start: %v %v", ok, err)
		}
		// The same generation's runs are not abandoned by each other.
		if r, _, _ := d.RunGet(ctx, id1); r.Status != driver.RunRunning {
			t.Fatalf("run of the same fence abandoned: %+v", r)
		}
		// Finish: wrong token, wrong fence, wrong lease refused; nothing changes.
		exit := int64(3)
		fin := driver.FinishRunParams{ID: id2, Token: a, Status: driver.RunFailed, Result: `{"ok":false}`, Error: "boom", ExitCode: &exit}
		for _, bad := range []driver.FinishRunParams{
			{ID: id2, Token: driver.TokenParams{Name: "job", Owner: "B", Fence: a.Fence}, Status: driver.RunSucceeded},
			{ID: id2, Token: driver.TokenParams{Name: "job", Owner: "A", Fence: a.Fence + 1}, Status: driver.RunSucceeded},
			{ID: id2, Token: driver.TokenParams{Name: "other", Owner: "A", Fence: a.Fence}, Status: driver.RunSucceeded},
			{ID: id2 + 1000, Token: a, Status: driver.RunSucceeded},
		} {
			if ok, err := d.RunFinish(ctx, bad); err != nil || ok {
				t.Errorf("finish %+v: %v %v", bad, ok, err)
			}
		}
		if ok, err := d.RunFinish(ctx, fin); err != nil || !ok {
			t.Fatalf("finish: %v %v", ok, err)
		}
		if ok, _ := d.RunFinish(ctx, fin); ok {
			t.Error("finished twice")
		}
		r, _, _ = d.RunGet(ctx, id2)
		if r.Status != driver.RunFailed || r.Result != `{"ok":false}` || r.Error != "boom" || r.ExitCode == nil || *r.ExitCode != 3 || r.FinishedAtMs < r.StartedAtMs {
			t.Fatalf("finished run %+v", r)
		}
		// A finish without a result keeps the detail recorded at start.
		if ok, err := d.RunFinish(ctx, driver.FinishRunParams{ID: id1, Token: a, Status: driver.RunSucceeded}); err != nil || !ok {
			t.Fatalf("finish 1: %v %v", ok, err)
		}
		if r, _, _ = d.RunGet(ctx, id1); r.Result != `{"step":1}` || r.Error != "" || r.ExitCode != nil || r.Status != driver.RunSucceeded {
			t.Fatalf("finished run 1 %+v", r)
		}

		// A new generation abandons the old generation's running runs.
		id3, _, _ := d.RunStart(ctx, driver.StartRunParams{Token: a})
		if _, _, err := d.LeaseRevoke(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := d.RunFinish(ctx, driver.FinishRunParams{ID: id3, Token: a, Status: driver.RunSucceeded}); ok {
			t.Fatal("finished with a revoked token")
		}
		b := mustAcquire(t, d, "job", "B", 60_000)
		id4, ok, err := d.RunStart(ctx, driver.StartRunParams{Token: b})
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		r, _, _ = d.RunGet(ctx, id3)
		if r.Status != driver.RunAbandoned || r.FinishedAtMs == 0 || !strings.Contains(r.Error, "superseded") {
			t.Fatalf("old run not abandoned: %+v", r)
		}

		// Mark lost needs the run's own fence and a running run; no lease check.
		if ok, _ := d.RunMarkLost(ctx, id4, b.Fence+1, "x"); ok {
			t.Error("marked lost with the wrong fence")
		}
		if ok, err := d.RunMarkLost(ctx, id4, b.Fence, "gave up"); err != nil || !ok {
			t.Fatalf("mark lost: %v %v", ok, err)
		}
		if ok, _ := d.RunMarkLost(ctx, id4, b.Fence, "again"); ok {
			t.Error("marked lost twice")
		}
		if r, _, _ = d.RunGet(ctx, id4); r.Status != driver.RunLost || r.Error != "gave up" {
			t.Fatalf("lost run %+v", r)
		}

		// Sweep: a running run whose generation lapsed becomes lost; a valid
		// one stays.
		// (A minute and an explicit expiry: a 1 s lease could lapse before
		// the first sweep on a loaded machine.)
		c := mustAcquire(t, d, "short", "C", 60_000)
		idShort, _, _ := d.RunStart(ctx, driver.StartRunParams{Token: c})
		idValid, _, _ := d.RunStart(ctx, driver.StartRunParams{Token: b})
		if n, err := d.RunSweep(ctx); err != nil || n != 0 {
			t.Fatalf("sweep with every generation valid: %d %v", n, err)
		}
		expireNow(t, d, "short")
		if n, err := d.RunSweep(ctx); err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		if r, _, _ := d.RunGet(ctx, idShort); r.Status != driver.RunLost || r.FinishedAtMs == 0 || r.Error == "" {
			t.Fatalf("swept run %+v", r)
		}
		if r, _, _ := d.RunGet(ctx, idValid); r.Status != driver.RunRunning {
			t.Fatalf("valid run swept: %+v", r)
		}

		// Get and list.
		if _, ok, err := d.RunGet(ctx, 999_999); ok || err != nil {
			t.Errorf("get missing: %v %v", ok, err)
		}
		all, err := d.RunList(ctx, driver.RunFilter{})
		if err != nil || len(all) != 6 {
			t.Fatalf("list: %d %v", len(all), err)
		}
		for i := 1; i < len(all); i++ {
			if all[i-1].ID <= all[i].ID {
				t.Fatalf("list not newest first: %d before %d", all[i-1].ID, all[i].ID)
			}
		}
		for _, tc := range []struct {
			f    driver.RunFilter
			want int
		}{
			{driver.RunFilter{Lease: "job"}, 5},
			{driver.RunFilter{Lease: "Job"}, 0},
			{driver.RunFilter{Lease: "short"}, 1},
			{driver.RunFilter{Status: driver.RunRunning}, 1},
			{driver.RunFilter{Lease: "job", Status: driver.RunLost}, 1},
			{driver.RunFilter{Limit: 2}, 2},
			{driver.RunFilter{Lease: "job", Limit: 10}, 5},
		} {
			got, err := d.RunList(ctx, tc.f)
			if err != nil || len(got) != tc.want {
				t.Errorf("list %+v: %d runs, want %d (%v)", tc.f, len(got), tc.want, err)
			}
		}
	})
}

// Concurrent starts for one lease must neither fail nor lose a run: InnoDB
// may pick one as a deadlock victim on the runs index, and the driver runs
// it again.
func TestRunStartConcurrent(t *testing.T) {
	for _, iso := range isolations {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			d := newDriver(t, viaOpen)
			ctx := ctxT(t)
			a := mustAcquire(t, d, "job", "A", 60_000)
			before := deadlocks.Load()
			var wg sync.WaitGroup
			for range 10 {
				wg.Go(func() {
					w, err := New(sessionPool(t, iso), d.prefix)
					if err != nil {
						t.Error(err)
						return
					}
					for range 20 {
						// An older generation's running run for each start to abandon.
						if _, err := w.db.ExecContext(ctx, "INSERT INTO "+d.prefix+"runs (lease_name, owner_token, fence_token, status, started_at_ms) VALUES ('job', 'old', 0, 'running', 0)"); err != nil {
							t.Error(err)
							return
						}
						if _, ok, err := w.RunStart(ctx, driver.StartRunParams{Token: a}); err != nil || !ok {
							t.Errorf("start: %v %v", ok, err)
							return
						}
					}
				})
			}
			wg.Wait()
			runs, err := d.RunList(ctx, driver.RunFilter{Status: driver.RunRunning})
			if err != nil || len(runs) != 200 {
				t.Fatalf("%d running runs, want 200 (%v)", len(runs), err)
			}
			for _, r := range runs {
				if r.Fence != a.Fence {
					t.Fatalf("older run still running: %+v", r)
				}
			}
			t.Logf("%s: %d deadlocks retried", iso, deadlocks.Load()-before)
		})
	}
}
