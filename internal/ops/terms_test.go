package ops_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/ops"
	"github.com/fencekit/fence/internal/teststore"
)

// The terms fence.Elect records show on the page: a row of kind "term"
// with the leader's name, start, end and fence, and an outlined bar on the
// timeline whose title names the leader. Runs show their holder too.
func TestPageShowsTerms(t *testing.T) {
	teststore.Each(t, func(t *testing.T, b teststore.Backend) {
		s := b.Open(t, fence.WithHolder("leader-7:42"))
		ctx, cancel := context.WithCancel(context.Background())
		var tok fence.Token
		err := fence.Elect(ctx, s, "controller", fence.ElectionCallbacks{
			OnStartedLeading: func(_ context.Context, t0 fence.Token) { tok = t0; cancel() },
		}, fence.WithTTL(3*time.Second))
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		l, err := s.Acquire(context.Background(), "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		job, err := s.StartRun(context.Background(), l.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs, err := s.Runs(context.Background(), fence.RunFilter{Lease: "controller"})
		if err != nil || len(runs) != 1 {
			t.Fatalf("terms of controller: %v %+v", err, runs)
		}
		term := runs[0]

		srv := httptest.NewServer(ops.Handler(s))
		defer srv.Close()
		_, page := get(t, srv.URL+"/")
		rows := section(t, page, "runs")
		want := fmt.Sprintf(`<tr data-run="%d"><td class="id num">%d</td><td class="kind term">term</td><td class="lease">controller</td><td class="holder">leader-7:42</td><td class="fence num">%s</td><td class="status succeeded">succeeded</td>`,
			term.ID, term.ID, spans(tok.Fence))
		if !strings.Contains(rows, want) {
			t.Errorf("no term row %s in\n%s", want, rows)
		}
		if want := fmt.Sprintf(`<tr data-run="%d"><td class="id num">%d</td><td class="kind run">run</td><td class="lease">job</td><td class="holder">leader-7:42</td>`, job, job); !strings.Contains(rows, want) {
			t.Errorf("no run row %s in\n%s", want, rows)
		}
		if want := fmt.Sprintf(`<rect class="bar succeeded term" data-run="%d"`, term.ID); !strings.Contains(page, want) {
			t.Errorf("the timeline has no term bar %s", want)
		}
		if !strings.Contains(page, "<title>term of leader leader-7:42 (run ") {
			t.Error("the term's bar does not name its leader")
		}
		_, api := get(t, srv.URL+"/api/runs?lease=controller")
		if !strings.Contains(api, `"kind":"term"`) {
			t.Errorf("/api/runs has no kind term: %s", api)
		}
	})
}
