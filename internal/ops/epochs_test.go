package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/ops"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/task"
)

type epochJSON struct {
	Task      string `json:"task"`
	Epoch     int64  `json:"epoch"`
	Holder    string `json:"holder"`
	State     string `json:"state"`
	Current   bool   `json:"current"`
	From      string `json:"from"`
	To        string `json:"to"`
	Committed int64  `json:"committed"`
	Stale     int64  `json:"stale"`
}

// A task's epochs show on the page like runs: epoch A commits a step, is
// replanned away while its next effect runs (its commit is refused, its
// claim stays open: a stale effect), and epoch B commits a step and runs
// on. /api/epochs, the epochs' SVG and the page's table and timeline say
// who held each epoch, from when to when, what it committed and its stale
// effects; the page stays well-formed HTML.
func TestPageShowsTaskEpochs(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		ctx := context.Background()
		s := b.Open(t, fence.WithHolder("worker-b:7"))
		ts, err := task.New(s)
		if err != nil {
			t.Fatal(err)
		}
		led, err := task.NewLedger(ts)
		if err != nil {
			t.Fatal(err)
		}
		const id = "invoice-42"
		if err := ts.Create(ctx, id, task.Plan{Model: "scripted"}); err != nil {
			t.Fatal(err)
		}
		a, err := ts.Start(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ok := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
		if _, err := led.Do(ctx, a, "reserve", []byte("r"), ok); err != nil {
			t.Fatal(err)
		}
		var bEp task.Epoch
		_, err = led.Do(ctx, a, "charge", []byte("c"), func(ctx context.Context) ([]byte, error) {
			var err error
			bEp, err = ts.Replan(ctx, id, task.Plan{Model: "replanned"})
			return []byte("charged"), err
		})
		if !errors.Is(err, fence.ErrLost) {
			t.Fatalf("epoch A's commit after the replan: %v, want fence.ErrLost", err)
		}
		if _, err := led.Do(ctx, bEp, "ship", []byte("s"), ok); err != nil {
			t.Fatal(err)
		}

		srv := httptest.NewServer(ops.Handler(s))
		defer srv.Close()
		resp, body := get(t, srv.URL+"/api/epochs")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/api/epochs: %s %s", resp.Status, body)
		}
		var v struct {
			Epochs []epochJSON `json:"epochs"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil || len(v.Epochs) != 2 {
			t.Fatalf("/api/epochs: %v %s", err, body)
		}
		ea, eb := v.Epochs[0], v.Epochs[1]
		if ea.Task != id || ea.Epoch != a.Number() || ea.State != "superseded" || ea.Current || ea.Committed != 1 || ea.Stale != 1 || ea.To == "" {
			t.Errorf("epoch A: %+v (epoch %d)", ea, a.Number())
		}
		if eb.Task != id || eb.Epoch != bEp.Number() || eb.State != "running" || !eb.Current || eb.Committed != 1 || eb.Stale != 0 || eb.To != "" || eb.Holder != "worker-b:7" {
			t.Errorf("epoch B: %+v (epoch %d)", eb, bEp.Number())
		}
		fa, _ := time.Parse(time.RFC3339Nano, ea.From)
		ta, _ := time.Parse(time.RFC3339Nano, ea.To)
		fb, _ := time.Parse(time.RFC3339Nano, eb.From)
		if fa.IsZero() || fb.IsZero() || !fa.Before(fb) || ta.Before(fb) {
			t.Errorf("epoch A from %s to %s, epoch B from %s: A must end where B starts or later", ea.From, ea.To, eb.From)
		}

		_, svg := get(t, srv.URL+"/api/epochs/timeline")
		for _, want := range []string{
			fmt.Sprintf(`<rect class="bar lost epoch" data-run="1" data-fence="%d" data-status="lost" data-kind="epoch"`, a.Number()),
			fmt.Sprintf(`<rect class="bar running epoch" data-run="2" data-fence="%d" data-status="running" data-kind="epoch"`, bEp.Number()),
			fmt.Sprintf(`epoch %d of task invoice-42 (superseded), holder not recorded, 1 effect(s) committed, 1 stale effect(s) refused or in doubt`, a.Number()),
			fmt.Sprintf(`epoch %d of task invoice-42 (running), held by worker-b:7, 1 effect(s) committed`, bEp.Number()),
		} {
			if !strings.Contains(svg, want) {
				t.Errorf("the epochs' image lacks %s\n%s", want, svg)
			}
		}

		for _, path := range []string{"/", "/?lease=task:" + id} {
			_, page := get(t, srv.URL+path)
			rows := section(t, page, "epochs")
			for _, want := range []string{
				fmt.Sprintf(`<tr data-epoch="%d" data-task="invoice-42"><td class="task">invoice-42</td><td class="fence num">%s</td><td class="holder"></td><td class="status superseded">superseded</td>`, a.Number(), spans(a.Number())),
				fmt.Sprintf(`<tr data-epoch="%d" data-task="invoice-42"><td class="task">invoice-42</td><td class="fence num">%s</td><td class="holder">worker-b:7</td><td class="status running">running</td>`, bEp.Number(), spans(bEp.Number())),
				`<td class="num stale-count">1</td>`,
			} {
				if !strings.Contains(rows, want) {
					t.Errorf("GET %s: the epochs table lacks %s\n%s", path, want, rows)
				}
			}
			if !strings.Contains(page, `<svg class="timeline" id="epochline"`) || !strings.Contains(page, `data-kind="epoch"`) {
				t.Errorf("GET %s: no epochs timeline", path)
			}
			for _, p := range htmlProblems(page) {
				t.Errorf("GET %s: %s", path, p)
			}
		}
		// A lease that is not a task's has no epochs section.
		if _, page := get(t, srv.URL+"/?lease=job"); strings.Contains(page, `id="epochs"`) {
			t.Error("a plain lease's view shows task epochs")
		}
		if _, body := get(t, srv.URL+"/api/epochs?lease=task:none-such"); !strings.Contains(body, `"epochs":[]`) {
			t.Errorf("/api/epochs of an unknown task: %s", body)
		}
	})
}
