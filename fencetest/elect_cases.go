package fencetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence"
)

func electCases() []suiteCase {
	return []suiteCase{
		{"ElectOneLeaderReportedToFollower", electOneLeader},
		{"ElectLeaderStopsBeforeLapseThenFollowerTakesOver", electOutage},
	}
}

// electTimeout bounds every wait of the election cases: generous, so a
// loaded machine passes, and never a fixed sleep.
const electTimeout = 30 * time.Second

// electEvent is one callback of one elector, in the order of all of them.
type electEvent struct {
	who   int
	kind  string // "leader" (OnNewLeader), "started", "done" (the leader's ctx ended), "stopped"
	id    string
	fence int64
	tok   fence.Token // started: the term's token
	cause error       // done: context.Cause of the leader's ctx
	at    time.Time   // done: when the callback saw it
	lapse time.Time   // done: fence.LapseTime of the leader's ctx then
}

// electLog records the callbacks of several electors on one name and
// checks how they interleave.
type electLog struct {
	t  *testing.T
	mu sync.Mutex
	ev []electEvent
	// running is, per elector, whether one of its callbacks is running.
	running map[int]bool
	next    int           // wait looks at events from here on
	added   chan struct{} // signalled when an event is added
}

func newElectLog(t *testing.T) *electLog {
	return &electLog{t: t, running: map[int]bool{}, added: make(chan struct{}, 1)}
}

func (l *electLog) enter(who int, e electEvent) {
	l.mu.Lock()
	if l.running[who] {
		l.t.Errorf("elector %d: %s called while another of its callbacks runs", who, e.kind)
	}
	l.running[who] = true
	l.mu.Unlock()
	l.add(e)
}

func (l *electLog) exit(who int) {
	l.mu.Lock()
	l.running[who] = false
	l.mu.Unlock()
}

func (l *electLog) add(e electEvent) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
}

func (l *electLog) callbacks(who int) fence.ElectionCallbacks {
	var leaderCtx context.Context
	return fence.ElectionCallbacks{
		OnNewLeader: func(id string, f int64) {
			l.enter(who, electEvent{who: who, kind: "leader", id: id, fence: f})
			l.exit(who)
		},
		OnStartedLeading: func(ctx context.Context, tok fence.Token) {
			leaderCtx = ctx
			l.enter(who, electEvent{who: who, kind: "started", id: tok.Short(), fence: tok.Fence, tok: tok})
			if got, ok := fence.TokenFrom(ctx); !ok || got != tok {
				l.t.Errorf("elector %d: TokenFrom(leader ctx) = %v %v, want the term's token", who, got, ok)
			}
			<-ctx.Done()
			lapse, _ := fence.LapseTime(ctx)
			l.add(electEvent{who: who, kind: "done", fence: tok.Fence, cause: context.Cause(ctx), at: time.Now(), lapse: lapse})
			l.exit(who)
		},
		OnStoppedLeading: func() {
			if leaderCtx == nil || leaderCtx.Err() == nil {
				l.t.Errorf("elector %d: OnStoppedLeading before its leader ctx was done", who)
			}
			l.enter(who, electEvent{who: who, kind: "stopped"})
			l.exit(who)
		},
	}
}

// wait returns the first event that matches after the one the last wait
// returned, failing t after electTimeout.
func (l *electLog) wait(what string, match func(electEvent) bool) electEvent {
	l.t.Helper()
	return l.find(what, true, match)
}

// seen returns the first event that matches, since the start, failing t
// after electTimeout.
func (l *electLog) seen(what string, match func(electEvent) bool) electEvent {
	l.t.Helper()
	return l.find(what, false, match)
}

func (l *electLog) find(what string, after bool, match func(electEvent) bool) electEvent {
	l.t.Helper()
	timeout := time.After(electTimeout)
	for {
		l.mu.Lock()
		from := 0
		if after {
			from = l.next
		}
		for i := from; i < len(l.ev); i++ {
			if match(l.ev[i]) {
				e := l.ev[i]
				if after {
					l.next = i + 1
				}
				l.mu.Unlock()
				return e
			}
		}
		l.mu.Unlock()
		select {
		case <-l.added:
		case <-timeout:
			l.t.Fatalf("no %s within %v; events: %s", what, electTimeout, l)
		}
	}
}

func (l *electLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, e := range l.ev {
		fmt.Fprintf(&b, "[%d %s %s %d]", e.who, e.kind, e.id, e.fence)
	}
	return b.String()
}

// check fails t unless, over all electors, at most one leads at a time
// (from its OnStartedLeading to the end of its ctx), each term is
// OnNewLeader(itself) → started → done → stopped, and fences of successive
// terms increase.
func (l *electLog) check() {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	leading := 0 // who leads now, 0: nobody
	state := map[int]string{}
	lastSeen := map[int]int64{}
	var lastTerm int64
	for i, e := range l.ev {
		bad := func(why string) {
			l.t.Errorf("event %d (%d %s %d): %s; events: %v", i, e.who, e.kind, e.fence, why, l.ev)
		}
		switch e.kind {
		case "leader":
			if state[e.who] == "started" || state[e.who] == "done" {
				bad("OnNewLeader during the elector's own term")
			}
			lastSeen[e.who] = e.fence
		case "started":
			if leading != 0 {
				bad(fmt.Sprintf("started while elector %d leads", leading))
			}
			if state[e.who] == "started" || state[e.who] == "done" {
				bad("started twice without stopping")
			}
			if lastSeen[e.who] != e.fence {
				bad("started without OnNewLeader reporting its own term first")
			}
			if e.fence <= lastTerm {
				bad(fmt.Sprintf("term fence not above the previous term's %d", lastTerm))
			}
			leading, lastTerm = e.who, e.fence
			state[e.who] = "started"
		case "done":
			if state[e.who] != "started" {
				bad("ctx done outside a term")
			}
			leading = 0
			state[e.who] = "done"
		case "stopped":
			if state[e.who] != "done" {
				bad("OnStoppedLeading before the leader's ctx was done and OnStartedLeading returned")
			}
			state[e.who] = ""
		}
	}
}

type elector struct {
	cancel context.CancelFunc
	done   chan error
}

func startElector(t *testing.T, s *fence.Store, log *electLog, who int, opts ...fence.RunOption) *elector {
	ctx, cancel := context.WithCancel(ctxT(t))
	e := &elector{cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- fence.Elect(ctx, s, "leader", log.callbacks(who), opts...) }()
	t.Cleanup(func() { e.stop(t) })
	return e
}

// stop cancels the elector and checks that Elect returned ctx's error.
func (e *elector) stop(t *testing.T) {
	t.Helper()
	e.cancel()
	select {
	case err, ok := <-e.done:
		if ok && !errors.Is(err, context.Canceled) {
			t.Errorf("Elect returned %v, want context.Canceled", err)
		}
		if ok {
			close(e.done)
		}
	case <-time.After(electTimeout):
		t.Errorf("Elect did not return within %v of its ctx ending", electTimeout)
	}
}

// Two electors on one name: exactly one leads, the other is told who with
// OnNewLeader; when the leader's Elect ends it releases the lease, and the
// other takes over long before the TTL, with a higher fence.
func electOneLeader(t *testing.T, b Backend) {
	p := prefix()
	log := newElectLog(t)
	const ttl = 30 * time.Second
	opts := []fence.RunOption{fence.WithTTL(ttl), fence.WithRetryPeriod(100 * time.Millisecond)}
	es := map[int]*elector{
		1: startElector(t, b.Open(t, p, fence.WithHolder("replica-1")), log, 1, opts...),
		2: startElector(t, b.Open(t, p, fence.WithHolder("replica-2")), log, 2, opts...),
	}
	first := log.wait("leader", func(e electEvent) bool { return e.kind == "started" })
	other := 3 - first.who
	seen := log.seen("OnNewLeader on the follower", func(e electEvent) bool { return e.who == other && e.kind == "leader" })
	// The follower names the leader by its holder name, never its token.
	if want := fmt.Sprintf("replica-%d", first.who); seen.fence != first.fence || seen.id != want {
		t.Fatalf("follower saw leader %q fence %d; the leader is %q fence %d", seen.id, seen.fence, want, first.fence)
	}

	handover := time.Now()
	es[first.who].stop(t)
	next := log.wait("takeover", func(e electEvent) bool { return e.kind == "started" })
	if next.who != other || next.fence <= first.fence {
		t.Fatalf("after the leader stopped: elector %d leads with fence %d; want elector %d with a fence above %d", next.who, next.fence, other, first.fence)
	}
	if d := time.Since(handover); d >= ttl/2 {
		t.Errorf("takeover %v after the leader stepped down; a release should not wait for the TTL %v", d, ttl)
	}
	es[other].stop(t)
	log.check()
}

// A leader cut off from the database (its connections closed: it can
// neither renew nor release) has its ctx cancelled, with ErrUnproven, before
// its lease could lapse; the follower takes over after the lapse with a
// higher fence, and a fenced write with the old leader's token is refused.
func electOutage(t *testing.T, b Backend) {
	p := prefix()
	log := newElectLog(t)
	const ttl = 6 * time.Second
	opts := []fence.RunOption{fence.WithTTL(ttl), fence.WithRetryPeriod(200 * time.Millisecond)}
	s1, s2 := b.Open(t, p), b.Open(t, p)
	tbl := items(t, s2)
	e1 := startElector(t, s1, log, 1, opts...)
	old := log.wait("elector 1 leads", func(e electEvent) bool { return e.kind == "started" })
	e2 := startElector(t, s2, log, 2, opts...)
	log.seen("elector 2 sees elector 1", func(e electEvent) bool { return e.who == 2 && e.kind == "leader" && e.fence == old.fence })

	handleFor(s1).close()
	end := log.wait("the leader's ctx ending", func(e electEvent) bool { return e.kind == "done" })
	if end.who != 1 || !errors.Is(end.cause, fence.ErrUnproven) || !errors.Is(end.cause, fence.ErrLost) {
		t.Fatalf("elector %d's term ended with %v; want elector 1's, unproven", end.who, end.cause)
	}
	if !end.at.Before(end.lapse) {
		t.Errorf("the leader's ctx ended %v after its lease could lapse", end.at.Sub(end.lapse))
	}
	next := log.wait("takeover", func(e electEvent) bool { return e.kind == "started" })
	if next.who != 2 || next.fence <= old.fence {
		t.Fatalf("elector %d leads with fence %d; want elector 2 above %d", next.who, next.fence, old.fence)
	}
	oldTok, newTok := old.tok, next.tok
	h := handleFor(s2)
	write := func(tok fence.Token, v string) error {
		return h.inTx(ctxT(t), tok, func(tx txHandle) error {
			_, err := tx.fencedExec(ctxT(t), tok, sqlf(s2, "UPDATE "+tbl+" SET val = ? WHERE id = ? AND {{fence}}"), v, 1)
			return err
		})
	}
	if err := write(oldTok, "stale"); !errors.Is(err, fence.ErrLost) {
		t.Errorf("write with the old leader's token: %v, want ErrLost", err)
	}
	if err := write(newTok, "new"); err != nil {
		t.Errorf("write with the new leader's token: %v", err)
	}
	if v := val(t, s2, tbl, 1); v != "new" {
		t.Errorf("row after the writes: %q, want the new leader's", v)
	}
	e1.stop(t)
	e2.stop(t)
	log.check()
	t.Logf("leader ctx ended %v before its lease could lapse; fence %d → %d", end.lapse.Sub(end.at).Round(time.Millisecond), old.fence, next.fence)
}
