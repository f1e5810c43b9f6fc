package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

// TestStaleWorkerCommitsNothing is the article's story. A acquires and
// scans, then stalls past its TTL; meanwhile an item changes hands and B
// takes over, reconciles and completes. A resumes with its stale scan: every
// write it tries and its completion are refused with ErrLost, and B's results
// stand.
//
// A runs by hand on the store API: fence.Run renews from its own goroutine,
// so pausing only A's job would keep the lease alive. TestSIGSTOP stalls a
// whole process under the runner instead.
func TestStaleWorkerCommitsNothing(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e env) {
		ctx := ctxT(t)
		sa, sb := e.open(t), e.open(t)
		ra, rb := newReconciler(sa), newReconciler(sb)
		if err := ra.seed(ctx, demoItems); err != nil {
			t.Fatal(err)
		}

		la, err := sa.Acquire(ctx, leaseName, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		a := la.Token
		runA, err := sa.StartRun(ctx, a, nil)
		if err != nil {
			t.Fatal(err)
		}

		var (
			staleFixes []fix
			resB       fence.Result
			sumB       summary
		)
		ra.pause = func(ctx context.Context, fixes []fix) {
			staleFixes = fixes
			// A is frozen here. The world moves on, and B takes the lease
			// once A's lapses by the database clock.
			if err := ra.expect(ctx, 3, "ivan"); err != nil {
				t.Error(err)
			}
			var err error
			resB, err = fence.Run(ctx, sb, leaseName, rb.job(&sumB), fence.WithTTL(10*time.Second), fence.WithWait())
			if err != nil {
				t.Error(err)
			}
		}
		sumA, err := ra.reconcile(ctx, a, runA)

		if resB.Outcome != fence.Completed {
			t.Fatalf("B: %s: %v %v", resB.Outcome, resB.Err, resB.JobErr)
		}
		if resB.Token.Fence <= a.Fence {
			t.Errorf("B's fence %d, want above A's %d", resB.Token.Fence, a.Fence)
		}
		if !sumB.Reported || sumB.Fixed != 3 {
			t.Errorf("B's summary %+v, want 3 fixed and reported", sumB)
		}
		if !errors.Is(err, fence.ErrLost) {
			t.Fatalf("A's reconcile after the takeover: %v, want ErrLost", err)
		}
		if sumA.committed() {
			t.Errorf("A's summary %+v: A claims to have committed something", sumA)
		}
		if want := []fix{{2, "bob", "carol"}, {3, "dave", "erin"}, {5, "grace", "heidi"}}; fmt.Sprint(staleFixes) != fmt.Sprint(want) {
			t.Fatalf("A scanned %v, want %v", staleFixes, want)
		}

		// reconcile stops at the first refusal; try every other write too,
		// to show each is refused on its own rather than merely skipped.
		lost := func(what string, err error) {
			t.Helper()
			var le *fence.LostError
			switch {
			case !errors.Is(err, fence.ErrLost):
				t.Errorf("A's %s: %v, want ErrLost", what, err)
			case !errors.As(err, &le):
				t.Errorf("A's %s: %v is not a *fence.LostError", what, err)
			case le.Reason != fence.LostSuperseded || le.Fence != a.Fence || le.Current != resB.Token.Fence:
				t.Errorf("A's %s: %v, want fence %d superseded by %d", what, err, a.Fence, resB.Token.Fence)
			}
		}
		for _, f := range staleFixes {
			lost("fix "+f.String(), ra.apply(ctx, a, f))
		}
		lost("report", ra.writeReport(ctx, a, runA, staleFixes))
		lost("completion", sa.FinishRun(ctx, a, runA, fence.Completion{Result: summary{Fixed: 3, Reported: true}}))
		_, err = sa.Renew(ctx, a, time.Second)
		lost("renewal", err)
		lost("release", sa.Release(ctx, a))

		checkOnlyB(t, ra, runA, resB.RunID, resB.Token.Fence)
	})
}

// TestSlowJobKeepsLease is the other half of the story: a job that is merely
// slow, in a process that still runs, is not stale. fence.Run renews its
// lease while the job takes longer than the TTL, nobody can take over, and
// its fenced writes commit.
func TestSlowJobKeepsLease(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e env) {
		ctx := ctxT(t)
		sa, sb := e.open(t), e.open(t)
		ra := newReconciler(sa)
		if err := ra.seed(ctx, demoItems); err != nil {
			t.Fatal(err)
		}
		const ttl = 3 * time.Second // generous: renewals must keep up under -race on a loaded machine
		var other fence.Result
		ra.pause = func(ctx context.Context, _ []fix) {
			time.Sleep(ttl + time.Second)
			var err error
			other, err = fence.Run(ctx, sb, leaseName, func(context.Context) error { return nil })
			if err != nil {
				t.Error(err)
			}
		}
		var sum summary
		res, err := fence.Run(ctx, sa, leaseName, ra.job(&sum), fence.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		if other.Outcome != fence.NotAcquired || !errors.Is(other.Err, fence.ErrHeld) {
			t.Errorf("second worker during the slow job: %s %v, want not-acquired, held", other.Outcome, other.Err)
		}
		if res.Outcome != fence.Completed {
			t.Fatalf("slow job: %s: %v %v", res.Outcome, res.Err, res.JobErr)
		}
		if sum.Fixed != 3 || !sum.Reported {
			t.Errorf("slow job summary %+v, want 3 fixed and reported", sum)
		}
		run, err := sa.GetRun(ctx, res.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if run.Status != fence.RunSucceeded {
			t.Errorf("slow job's run is %s, want succeeded", run.Status)
		}
	})
}

// TestDemo runs the timeline the command prints by default and checks that
// it tells the story.
func TestDemo(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e env) {
		var out bytes.Buffer
		if err := demo(ctxT(t), &out, e.dsn, e.prefix, time.Second); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		got := out.String()
		// Fences start at the database clock in µs: read A's and B's from
		// the timeline, then check every line that names them.
		var fa, fb string
		if m := regexp.MustCompile(`A acquired admin:reconciliation fence (\d+) `).FindStringSubmatch(got); m != nil {
			fa = m[1]
		}
		if m := regexp.MustCompile(`B acquired fence (\d+) `).FindStringSubmatch(got); m != nil {
			fb = m[1]
		}
		if fa == "" || fb == "" || len(fb) < len(fa) || (len(fb) == len(fa) && fb <= fa) {
			t.Errorf("A's fence %q and B's %q: want both, B's above A's:\n%s", fa, fb, got)
		}
		for _, want := range []string{
			"A acquired admin:reconciliation fence " + fa,
			"A pauses (GC/VM stall)",
			"B acquired fence " + fb,
			"B fixed 3 items, report written, completed",
			`A resumes; fenced write #2 bob->carol rejected: fence: lease "admin:reconciliation" fence ` + fa + " superseded by fence " + fb,
			"would have overwritten B's ivan with erin",
			"A's fenced report rejected",
			"A's completion rejected: zero rows",
			"3   ivan   ivan",
			"abandoned",
			"succeeded",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("demo output lacks %q:\n%s", want, got)
			}
		}
	})
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-nosuchflag"}, {"extra"}, {"worker", "-nosuchflag"}, {"worker", "extra"}} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != exitUsage {
			t.Errorf("reconcile %q: exit %d, want %d", args, code, exitUsage)
		}
	}
}
