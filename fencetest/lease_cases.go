package fencetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

const long = time.Minute

func leaseCases() []suiteCase {
	return []suiteCase{
		{"AcquireFreshTakesClockFloor", acquireFresh},
		{"AcquireHeldReportsHolder", acquireHeld},
		{"OldOwnerRefusedAfterTakeover", oldOwnerRefusedAfterTakeover},
		{"DelayedReleaseNeverReleasesNewerLease", delayedRelease},
		{"ExpiryByDatabaseClockDespiteSkew", expiryDespiteSkew},
		{"FenceMonotonicAcrossReleaseRevokeReopen", fenceMonotonic},
		{"RevokeMakesHolderStale", revokeMakesHolderStale},
		{"LostReasons", lostReasons},
		{"RenewExtendsPastTTL", renewExtends},
		{"RenewBatchPerLeaseResults", renewBatch},
		{"GetAndListShowDatabaseState", getAndList},
		{"ContentionOneWinnerPerFence", contention},
		{"BadInputRejectedAndNothingWritten", badInput},
		{"NamesAreExactBytes", namesExact},
		{"MigrateIsIdempotent", migrateIdempotent},
		{"AcquireWaitGetsLeaseAfterRelease", acquireWait},
		{"AcquireWaitHonoursContext", acquireWaitCtx},
	}
}

func mustAcquire(t testing.TB, s *fence.Store, name string, ttl time.Duration) fence.Token {
	t.Helper()
	l, err := s.Acquire(ctxT(t), name, ttl)
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	return l.Token
}

func wantLost(t testing.TB, err error, reason fence.LostReason, current int64) {
	t.Helper()
	var le *fence.LostError
	if !errors.As(err, &le) || !errors.Is(err, fence.ErrLost) {
		t.Fatalf("want ErrLost (%s), got %v", reason, err)
	}
	if le.Reason != reason {
		t.Fatalf("want reason %s, got %s (%v)", reason, le.Reason, err)
	}
	if current != 0 && le.Current != current {
		t.Fatalf("want current fence %d, got %d (%v)", current, le.Current, err)
	}
	if fence.IsRetryable(err) {
		t.Fatalf("a lost lease must not be retryable: %v", err)
	}
}

func acquireFresh(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	before := dbNow(t, s)
	l, err := s.Acquire(ctxT(t), "job", long)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token.Lease != "job" || len(l.Token.Owner) != 32 {
		t.Fatalf("token %+v", l.Token)
	}
	// A fresh row starts at the database clock in microseconds, not at 1:
	// a lease whose row a restore removed must not repeat its old fences.
	wantFloor(t, s, "fresh acquisition", l.Token.Fence, before)
	if ok, err := s.IsHeld(ctxT(t), l.Token); err != nil || !ok {
		t.Fatalf("IsHeld = %v, %v", ok, err)
	}
	// Owner tokens are random per acquisition.
	if err := s.Release(ctxT(t), l.Token); err != nil {
		t.Fatal(err)
	}
	l2 := mustAcquire(t, s, "job", long)
	if l2.Owner == l.Token.Owner || l2.Fence <= l.Token.Fence {
		t.Fatalf("second acquisition %+v after %+v", l2, l.Token)
	}
}

func acquireHeld(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	a := mustAcquire(t, s, "job", long)
	_, err := s.Acquire(ctxT(t), "job", long)
	var he *fence.HeldError
	if !errors.Is(err, fence.ErrHeld) || !errors.As(err, &he) {
		t.Fatalf("want ErrHeld, got %v", err)
	}
	if he.Fence != a.Fence || he.Remaining <= 0 || he.Remaining > long {
		t.Fatalf("holder %+v, want fence %d", he, a.Fence)
	}
	// The holder's owner token is its credential: a refusal must not hand
	// it to the refused caller, in the error or its message.
	if strings.Contains(fmt.Sprintf("%v %+v %#v", err, err, he), a.Owner) {
		t.Fatalf("the refusal carries the holder's owner token: %#v", he)
	}
	if !strings.Contains(err.Error(), `"job"`) || !strings.Contains(err.Error(), fmt.Sprintf("fence %d", a.Fence)) {
		t.Fatalf("message should name the lease and fence: %v", err)
	}
	if fence.IsRetryable(err) {
		t.Fatal("ErrHeld is an answer, not a transient error")
	}
	// A failed acquire changes nothing.
	if ok, _ := s.IsHeld(ctxT(t), a); !ok {
		t.Fatal("holder lost its lease to a failed acquire")
	}
}

// The article's story at the lease level: A's lease lapses, B takes over, and
// every later call of A's is refused while B is untouched.
func oldOwnerRefusedAfterTakeover(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	a := mustAcquire(t, s, "admin:reconciliation", long)
	lapse(t, s, a)
	bt := mustAcquire(t, s, "admin:reconciliation", long)
	wantAbove(t, "takeover", bt.Fence, a.Fence)
	_, err := s.Renew(ctx, a, long)
	wantLost(t, err, fence.LostSuperseded, bt.Fence)
	want := fmt.Sprintf(`fence: lease "admin:reconciliation" fence %d superseded by fence %d`, a.Fence, bt.Fence)
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("message %q, want prefix %q", err, want)
	}
	wantLost(t, s.Release(ctx, a), fence.LostSuperseded, bt.Fence)
	if ok, err := s.IsHeld(ctx, a); err != nil || ok {
		t.Fatalf("old IsHeld = %v, %v", ok, err)
	}
	if ok, err := s.IsHeld(ctx, bt); err != nil || !ok {
		t.Fatalf("new owner IsHeld = %v, %v", ok, err)
	}
	if _, err := s.Renew(ctx, bt, long); err != nil {
		t.Fatalf("new owner renew: %v", err)
	}
	// Same owner string with the new fence, or the new owner with the old
	// fence: neither is B's token.
	forged := fence.Token{Lease: bt.Lease, Owner: a.Owner, Fence: bt.Fence}
	if ok, _ := s.IsHeld(ctx, forged); ok {
		t.Fatal("old owner with new fence accepted")
	}
	forged = fence.Token{Lease: bt.Lease, Owner: bt.Owner, Fence: a.Fence}
	if ok, _ := s.IsHeld(ctx, forged); ok {
		t.Fatal("new owner with old fence accepted")
	}
}

// etcd-io/etcd#22082: a retried release of an old token released the newer
// lease. Here the old release must be refused and the new holder keep it.
func delayedRelease(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	bt := mustAcquire(t, s, "job", long)
	for i := 0; i < 3; i++ {
		wantLost(t, s.Release(ctx, a), fence.LostSuperseded, bt.Fence)
	}
	if ok, _ := s.IsHeld(ctx, bt); !ok {
		t.Fatal("newer lease released by an old token")
	}
	if _, err := s.Acquire(ctx, "job", long); !errors.Is(err, fence.ErrHeld) {
		t.Fatalf("lease should still be held by B: %v", err)
	}
}

// outcome records what a fixed script of calls returned, to compare runs of
// the script under different application clocks.
func expiryScript(t *testing.T, s *fence.Store) []string {
	ctx := ctxT(t)
	var out []string
	rec := func(step string, err error) {
		switch {
		case err == nil:
			out = append(out, step+": ok")
		case errors.Is(err, fence.ErrHeld):
			out = append(out, step+": held")
		case errors.Is(err, fence.ErrLost):
			var le *fence.LostError
			errors.As(err, &le)
			out = append(out, step+": lost "+string(le.Reason))
		default:
			t.Fatalf("%s: %v", step, err)
		}
	}
	// A long TTL ended by lapse: the calls that expect A still valid
	// cannot be outlasted by a loaded machine (at 1 s they could be).
	a, err := s.Acquire(ctx, "job", long)
	rec("A acquire", err)
	_, err = s.Acquire(ctx, "job", long)
	rec("B acquire while A valid", err)
	held, err := s.IsHeld(ctx, a.Token)
	rec(fmt.Sprintf("A held=%v", held), err)
	lapse(t, s, a.Token)
	held, err = s.IsHeld(ctx, a.Token)
	rec(fmt.Sprintf("A held after ttl=%v", held), err)
	_, err = s.Renew(ctx, a.Token, long)
	rec("A renew after ttl", err)
	info, err := s.Get(ctx, "job")
	rec("get state="+string(info.State), err)
	bl, err := s.Acquire(ctx, "job", long)
	rec(fmt.Sprintf("B acquire after ttl fence above A's=%v", bl.Token.Fence > a.Token.Fence), err)
	return out
}

// Validity is the database's clock: an application clock hours off changes
// no outcome.
func expiryDespiteSkew(t *testing.T, b Backend) {
	var runs [][]string
	for _, off := range []time.Duration{0, 5 * time.Hour, -5 * time.Hour} {
		s := b.Open(t, prefix(), fence.WithClock(fence.SkewedClock{Offset: off}))
		runs = append(runs, expiryScript(t, s))
	}
	want := []string{
		"A acquire: ok", "B acquire while A valid: held", "A held=true: ok",
		"A held after ttl=false: ok", "A renew after ttl: lost expired",
		"get state=expired: ok", "B acquire after ttl fence above A's=true: ok",
	}
	for i, r := range runs {
		if !reflect.DeepEqual(r, want) {
			t.Fatalf("clock run %d:\n got %q\nwant %q", i, r, want)
		}
	}
}

func fenceMonotonic(t *testing.T, b Backend) {
	p := prefix()
	s := b.Open(t, p)
	ctx := ctxT(t)
	var fences []int64
	a := mustAcquire(t, s, "job", long)
	fences = append(fences, a.Fence)
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	a = mustAcquire(t, s, "job", long)
	fences = append(fences, a.Fence)
	rf, err := s.Revoke(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	fences = append(fences, rf)
	a = mustAcquire(t, s, "job", long)
	fences = append(fences, a.Fence)
	lapse(t, s, a) // expire without release
	a = mustAcquire(t, s, "job", long)
	fences = append(fences, a.Fence)
	// A new connection pool over the same tables, as after a restart.
	s2 := b.Open(t, p)
	if err := s2.Release(ctx, a); err != nil {
		t.Fatalf("release through the re-opened store: %v", err)
	}
	a = mustAcquire(t, s2, "job", long)
	fences = append(fences, a.Fence)
	if v, err := s2.Migrate(ctx); err != nil || v < 1 {
		t.Fatalf("re-migrate: %v, %v", v, err)
	}
	if err := s2.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	a = mustAcquire(t, s2, "job", long)
	fences = append(fences, a.Fence)
	for i := 1; i < len(fences); i++ {
		wantAbove(t, fmt.Sprintf("fence %d of %v", i, fences), fences[i], fences[:i]...)
	}
}

func revokeMakesHolderStale(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	f, err := s.Revoke(ctx, "job")
	if err != nil {
		t.Fatalf("revoke: %v", err)
	}
	wantAbove(t, "revoke", f, a.Fence)
	_, err = s.Renew(ctx, a, long)
	wantLost(t, err, fence.LostRevoked, f)
	if ok, _ := s.IsHeld(ctx, a); ok {
		t.Fatal("revoked token still held")
	}
	info, err := s.Get(ctx, "job")
	if err != nil || info.State != fence.StateRevoked || info.Fence != f || info.Owner != "" {
		t.Fatalf("after revoke: %+v, %v", info, err)
	}
	// Revoking is immediate: the lease is free for the next owner.
	n := mustAcquire(t, s, "job", long)
	wantAbove(t, "acquisition after revoke", n.Fence, f)
	if _, err := s.Revoke(ctx, "absent"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("revoke of an absent lease: %v", err)
	}
}

func lostReasons(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	a := mustAcquire(t, s, "released", long)
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	_, err := s.Renew(ctx, a, long)
	wantLost(t, err, fence.LostReleased, a.Fence)
	wantLost(t, s.Release(ctx, a), fence.LostReleased, a.Fence)

	e := mustAcquire(t, s, "expired", long)
	lapse(t, s, e)
	_, err = s.Renew(ctx, e, long)
	wantLost(t, err, fence.LostExpired, e.Fence)
	wantLost(t, s.Check(ctx, e), fence.LostExpired, e.Fence)

	never := fence.Token{Lease: "never-acquired", Owner: strings.Repeat("a", 32), Fence: 1}
	_, err = s.Renew(ctx, never, long)
	wantLost(t, err, fence.LostMissing, 0)
	if _, err := s.Get(ctx, "never-acquired"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("get absent: %v", err)
	}
}

func renewExtends(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", time.Second)
	for i := 0; i < 8; i++ {
		if _, err := s.Renew(ctx, a, 2*time.Second); err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	// 1.2 s or more have passed: only the renewals kept it past the
	// acquire's 1 s.
	if ok, _ := s.IsHeld(ctx, a); !ok {
		t.Fatal("renewed lease expired")
	}
	if _, err := s.Acquire(ctx, "job", long); !errors.Is(err, fence.ErrHeld) {
		t.Fatalf("renewed lease taken: %v", err)
	}
	// Renewing to a shorter TTL shortens it: the database's now + ttl.
	if _, err := s.Renew(ctx, a, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	if ok, _ := s.IsHeld(ctx, a); ok {
		t.Fatal("lease outlived its renewed ttl")
	}
}

func renewBatch(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	var toks []fence.Token
	for i := 0; i < 50; i++ {
		toks = append(toks, mustAcquire(t, s, fmt.Sprintf("tenant-%03d", i), long))
	}
	// Lose three of them in three different ways.
	if _, err := s.Revoke(ctx, "tenant-007"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, toks[13]); err != nil {
		t.Fatal(err)
	}
	stale := toks[21]
	if err := s.Release(ctx, stale); err != nil {
		t.Fatal(err)
	}
	toks[21] = mustAcquire(t, s, "tenant-021", long)
	toks = append(toks, stale) // old and new token of one name in one batch
	errs, err := s.RenewBatch(ctx, toks, long)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != len(toks) {
		t.Fatalf("%d results for %d tokens", len(errs), len(toks))
	}
	for i, e := range errs {
		lost := i == 7 || i == 13 || i == len(toks)-1
		if lost != errors.Is(e, fence.ErrLost) || (!lost && e != nil) {
			t.Fatalf("token %d (%s): %v", i, toks[i], e)
		}
	}
	if out, err := s.RenewBatch(ctx, nil, long); err != nil || len(out) != 0 {
		t.Fatalf("empty batch: %v %v", out, err)
	}
}

func getAndList(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	h := mustAcquire(t, s, "c-held", long)
	r := mustAcquire(t, s, "b-released", long)
	if err := s.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	ae := mustAcquire(t, s, "a-expired", long)
	mustAcquire(t, s, "d-revoked", long)
	if _, err := s.Revoke(ctx, "d-revoked"); err != nil {
		t.Fatal(err)
	}
	lapse(t, s, ae)
	ls, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range ls {
		got = append(got, l.Name+"="+string(l.State))
		if l.DBNow.IsZero() || l.UpdatedAt.IsZero() {
			t.Fatalf("%s: missing database times %+v", l.Name, l)
		}
	}
	want := []string{"a-expired=expired", "b-released=released", "c-held=held", "d-revoked=revoked"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("list %v, want %v", got, want)
	}
	g, err := s.Get(ctx, "c-held")
	if err != nil {
		t.Fatal(err)
	}
	if g.Owner != h.Owner || g.Fence != h.Fence || g.Remaining <= 0 || g.Remaining > long || !g.ExpiresAt.After(g.DBNow) {
		t.Fatalf("get %+v", g)
	}
}

// N goroutines × M rounds on one name: every fence is won exactly once, no two
// holders overlap, and the only refusal is ErrHeld.
func contention(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	const workers, rounds = 8, 25
	var (
		mu      sync.Mutex
		winners = map[int64]int{}
		holders atomic.Int32
		wg      sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				l, err := s.Acquire(ctx, "hot", long)
				if errors.Is(err, fence.ErrHeld) {
					continue
				}
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				winners[l.Token.Fence]++
				mu.Unlock()
				holders.Add(-1)
				if err := s.Release(ctx, l.Token); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(winners) == 0 {
		t.Fatal("nobody won")
	}
	for f, n := range winners {
		if n != 1 {
			t.Fatalf("fence %d won %d times (fences %v)", f, n, winners)
		}
	}
	t.Logf("%d generations among %d workers × %d rounds", len(winners), workers, rounds)
}

func badInput(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	good := mustAcquire(t, s, "good", long)
	before, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{
		"empty":       "",
		"too long":    strings.Repeat("x", fence.MaxNameLen+1),
		"NUL":         "a\x00b",
		"control":     "a\nb",
		"invalid utf": "a\xffb",
	}
	for what, n := range names {
		if _, err := s.Acquire(ctx, n, long); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("acquire with %s name: %v", what, err)
		}
		if _, err := s.Revoke(ctx, n); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("revoke with %s name: %v", what, err)
		}
		if _, err := s.Get(ctx, n); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("get with %s name: %v", what, err)
		}
	}
	if _, err := s.Acquire(ctx, strings.Repeat("é", fence.MaxNameLen/2), long); err != nil {
		t.Errorf("a 190-byte name must be accepted: %v", err)
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, fence.MaxTTL + time.Second} {
		if _, err := s.Acquire(ctx, "ttl", ttl); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("acquire ttl %v: %v", ttl, err)
		}
		if _, err := s.Renew(ctx, good, ttl); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("renew ttl %v: %v", ttl, err)
		}
	}
	bad := []fence.Token{
		{},
		{Lease: "good", Owner: "not-hex", Fence: good.Fence},
		{Lease: "good", Owner: good.Owner, Fence: 0},
		{Lease: "good", Owner: good.Owner, Fence: -1},
		{Lease: "", Owner: good.Owner, Fence: 1},
	}
	for _, tk := range bad {
		if _, err := s.Renew(ctx, tk, long); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("renew %+v: %v", tk, err)
		}
		if err := s.Release(ctx, tk); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("release %+v: %v", tk, err)
		}
		if _, err := s.IsHeld(ctx, tk); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("is-held %+v: %v", tk, err)
		}
	}
	if _, err := handleFor(s).reopen(fence.WithPrefix("x; DROP TABLE y")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("bad prefix: %v", err)
	}
	// A pool store's driver has its dialect built in: none to get wrong.
	if s.DB() != nil {
		if _, err := fencedsn.OpenDB(ctx, s.DB(), "oracle"); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("bad dialect: %v", err)
		}
	}
	after, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Only the valid long name was added.
	if len(after) != len(before)+1 {
		t.Fatalf("bad input changed the table: %d rows before, %d after", len(before), len(after))
	}
	for i := range before {
		if after[i].Name == "good" && (after[i].Fence != good.Fence || after[i].Owner != good.Owner || after[i].State != fence.StateHeld) {
			t.Fatalf("good lease changed: %+v", after[i])
		}
	}
}

func namesExact(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	names := []string{"Job", "job", "JOB", "job ", "jöb", "job'; DROP TABLE fence_leases; --", `a"b\c`, "🦀:shard/7", "%", "_"}
	for _, n := range names {
		tk := mustAcquire(t, s, n, long)
		if got, err := s.Get(ctx, n); err != nil || got.Fence != tk.Fence || got.Owner != tk.Owner {
			t.Fatalf("%q reads back as %+v (%v), want its own token %v: names collided", n, got, err, tk)
		}
		back, err := fence.ParseToken(tk.String())
		if err != nil || back != tk {
			t.Fatalf("token %q round trip: %+v, %v", tk, back, err)
		}
		if ok, err := s.IsHeld(ctx, back); err != nil || !ok {
			t.Fatalf("%q is-held: %v %v", n, ok, err)
		}
	}
	ls, err := s.List(ctx)
	if err != nil || len(ls) != len(names) {
		t.Fatalf("list: %d leases, %v", len(ls), err)
	}
}

func migrateIdempotent(t *testing.T, b Backend) {
	s := b.Open(t, prefix())
	ctx := ctxT(t)
	v1, err := s.SchemaVersion(ctx)
	if err != nil || v1 < 1 {
		t.Fatalf("version after migrate: %d, %v", v1, err)
	}
	tk := mustAcquire(t, s, "job", long)
	for i := 0; i < 3; i++ {
		v, err := s.Migrate(ctx)
		if err != nil || v != v1 {
			t.Fatalf("migrate again: %d, %v (want %d)", v, err, v1)
		}
	}
	if ok, _ := s.IsHeld(ctx, tk); !ok {
		t.Fatal("migrate touched the data")
	}
	// Migrations from several processes at once.
	p := prefix()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.Open(t, p) // migrates
		}()
	}
	wg.Wait()
	if v, err := b.Open(t, p).SchemaVersion(ctx); err != nil || v != v1 {
		t.Fatalf("concurrent migrate: %d, %v", v, err)
	}
}

func acquireWait(t *testing.T, b Backend) {
	s := b.Open(t, prefix(), fence.WithWaitBackoff(5*time.Millisecond, 50*time.Millisecond))
	ctx := ctxT(t)
	a := mustAcquire(t, s, "job", long)
	done := make(chan fence.Lease, 1)
	go func() {
		l, err := s.AcquireWait(ctx, "job", long)
		if err != nil {
			t.Errorf("AcquireWait: %v", err)
		}
		done <- l
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("AcquireWait returned while the lease was held")
	default:
	}
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-done:
		wantAbove(t, "waiter", l.Token.Fence, a.Fence)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter did not acquire after release")
	}
	// A lease that simply expires is taken after its TTL.
	e := mustAcquire(t, s, "expiring", 200*time.Millisecond)
	l, err := s.AcquireWait(ctx, "expiring", long)
	if err != nil || l.Token.Fence <= e.Fence {
		t.Fatalf("wait for expiry: %+v %v", l, err)
	}
}

func acquireWaitCtx(t *testing.T, b Backend) {
	p := prefix()
	mustAcquire(t, b.Open(t, p), "job", long)
	// The deadline can cut the last attempt short (CI saw a new connection's
	// dial outlast it); the error still says who held the lease, from the
	// attempts that were answered. The deadline passes when the first
	// attempt has been refused: a one-second timeout could pass before a
	// loaded machine had answered any.
	ctx := newExpiringCtx(ctxT(t))
	s := b.Open(t, p, fence.WithObserver(expireOnHeld{ctx}))
	_, err := s.AcquireWait(ctx, "job", long)
	if !errors.Is(err, fence.ErrHeld) || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil {
		t.Fatalf("AcquireWait after deadline: %v", err)
	}
}
