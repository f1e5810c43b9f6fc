package cli

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The runbook's step after a restore, as an operator runs it: a running
// holder and a released lease are raised to an explicit floor and revoked,
// the holder's `fence run` stops and exits 76, and a second raise to the
// clock finds nothing below it (the explicit floor is an hour ahead).
func TestRaiseFences(t *testing.T) {
	t.Parallel() // it waits on leases and process trees, not the CPU
	eachBackend(t, func(t *testing.T, b *backend) {
		if r := b.fence(t, "run", "--lease", "done", "true"); r.code != 0 {
			t.Fatal(r)
		}
		started := filepath.Join(b.dir, "started")
		p := b.start(t, "run", "--lease", "busy", "--ttl", "3s", "--", "sh", "-c", "touch "+started+"; sleep 60")
		waitFile(t, started, 30*time.Second)
		busy, done := b.lease(t, "busy"), b.lease(t, "done")

		if r := b.fence(t, "raise-fences"); r.code != ExitUsage {
			t.Errorf("raise-fences without --force: want 64: %v", r)
		}
		for _, bad := range []string{"0123", "+5", "-1", "1e15", "x", "9223372036854775808"} {
			if r := b.fence(t, "raise-fences", "--force", "--to", bad); r.code != ExitUsage {
				t.Errorf("--to %s: want 64: %v", bad, r)
			}
		}
		// Above 2^53 - 1 a fence is no longer exact in JSON numbers read as
		// float64 (JavaScript): the library refuses it.
		if r := b.fence(t, "raise-fences", "--force", "--to", "9007199254740992"); r.code != ExitUsage || !strings.Contains(r.stderr, "JSON-safe") {
			t.Errorf("--to 2^53: want 64 naming the JSON limit: %v", r)
		}
		if l := b.lease(t, "busy"); l.Fence != busy.Fence || l.State != "held" {
			t.Fatalf("a refused raise changed the lease: %+v", l)
		}

		floor := busy.Fence + 3_600_000_000 // an hour of microseconds ahead
		var got raisedJSON
		r := b.fence(t, "--json", "raise-fences", "--force", "--to", strconv.FormatInt(floor, 10))
		if r.code != 0 || jsonUnmarshal(r.stdout, &got) != nil {
			t.Fatalf("raise-fences --json: %v", r)
		}
		want := []raisedLeaseJSON{
			{Lease: "busy", Fence: floor, PreviousFence: busy.Fence, PreviousState: "held", PreviousOwner: busy.Owner, PreviousHolder: busy.Holder},
			{Lease: "done", Fence: floor, PreviousFence: done.Fence, PreviousState: "released", PreviousOwner: done.Owner, PreviousHolder: done.Holder},
		}
		if busy.Holder == "" || done.Holder == "" {
			t.Errorf("the leases should name their holders: %+v %+v", busy, done)
		}
		if got.Floor != floor || len(got.Raised) != 2 || got.Raised[0] != want[0] || got.Raised[1] != want[1] {
			t.Errorf("raise-fences --json: %+v\nwant floor %d, %+v", got, floor, want)
		}
		for _, name := range []string{"busy", "done"} {
			if l := b.lease(t, name); l.State != "revoked" || l.Fence != floor || l.Owner != "" || l.Holder != "" {
				t.Errorf("%s after the raise: %+v", name, l)
			}
		}
		ra := p.wait(time.Minute)
		if ra.code != ExitLost {
			t.Fatalf("the holder after the raise: want 76: %v", ra)
		}
		oneErrorLine(t, ra, "lease busy fence "+strconv.FormatInt(busy.Fence, 10)+" revoked (fence is now "+strconv.FormatInt(floor, 10)+")")

		r = b.fence(t, "raise-fences", "--force")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "no lease has a fence below ") {
			t.Errorf("a raise to the clock after one an hour ahead should change nothing: %v", r)
		}
		// The human form names what it changed.
		r = b.fence(t, "run", "--lease", "later", "true")
		if r.code != 0 {
			t.Fatal(r)
		}
		later := b.lease(t, "later")
		r = b.fence(t, "raise-fences", "--force", "--yes", "--to", strconv.FormatInt(floor+10, 10))
		if r.code != 0 || !strings.Contains(r.stdout, "raised 3 lease(s) to fence "+strconv.FormatInt(floor+10, 10)) ||
			!strings.Contains(r.stdout, strconv.FormatInt(later.Fence, 10)) {
			t.Errorf("raise-fences table: %v", r)
		}
	})
}
