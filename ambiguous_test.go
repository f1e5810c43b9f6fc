package fence

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
)

// lostReply commits the real statement and then reports a transport error,
// as when the connection drops after the commit but before the answer.
type lostReply struct {
	driver.Driver
	commit  bool // run the real acquire before failing
	getFail bool // and make the follow-up read fail too
}

var errConnReset = errors.New("read tcp: connection reset by peer")

func (d *lostReply) LeaseAcquire(ctx context.Context, p driver.AcquireParams) (driver.AcquireResult, error) {
	if d.commit {
		d.Driver.LeaseAcquire(ctx, p)
	}
	return driver.AcquireResult{}, errConnReset
}

func (d *lostReply) LeaseGet(ctx context.Context, name string) (driver.Lease, bool, error) {
	if d.getFail {
		return driver.Lease{}, false, errConnReset
	}
	return d.Driver.LeaseGet(ctx, name)
}

func (d *lostReply) IsServerError(err error) bool {
	return !errors.Is(err, errConnReset) && d.Driver.IsServerError(err)
}

// migratedSQLite is a migrated store on a fresh SQLite file, whose driver a
// test may then wrap.
func migratedSQLite(t *testing.T, opts ...Option) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := testOpen(ctx, "sqlite:"+filepath.Join(t.TempDir(), "a.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAmbiguousAcquireIsResolvedByOwner(t *testing.T) {
	ctx := context.Background()
	s := migratedSQLite(t)
	real := s.drv
	fake := &lostReply{Driver: real, commit: true}
	s.drv = fake

	// Committed, reply lost: the row carries our owner, so we hold it.
	l, err := s.Acquire(ctx, "a", time.Minute)
	if row, gerr := s.Get(ctx, "a"); err != nil || gerr != nil || l.Token.Fence != row.Fence || l.Token.Owner != row.Owner {
		t.Fatalf("committed acquire with a lost reply: %+v %v; the row: %+v %v", l, err, row, gerr)
	}
	if ok, _ := s.IsHeld(ctx, l.Token); !ok {
		t.Fatal("resolved token is not held")
	}
	// Held by someone else: ours is not held, but whether it committed (and
	// was superseded) or not cannot be told, so it stays unknown.
	_, err = s.Acquire(ctx, "a", time.Minute)
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("acquire of a held lease with a lost reply: %v", err)
	}
	// The row cannot be read either: unknown.
	fake.getFail = true
	_, err = s.Acquire(ctx, "b", time.Minute)
	var ae *AmbiguousError
	if !errors.Is(err, ErrAmbiguous) || !errors.As(err, &ae) || ae.Op != "acquire" {
		t.Fatalf("unresolvable acquire: %v", err)
	}
	// A renew whose reply was lost is unknown too, and retryable.
	s.drv = &lostReply{Driver: real}
	_, err = s.Renew(ctx, l.Token, time.Minute)
	if !errors.Is(err, ErrAmbiguous) || errors.Is(err, ErrLost) {
		t.Fatalf("renew with a lost reply: %v", err)
	}
}

func (d *lostReply) LeaseRenew(ctx context.Context, t driver.TokenParams, ttlMs int64) (driver.RenewResult, error) {
	return driver.RenewResult{}, errConnReset
}

// heldThenDown answers the first acquire for real and then cannot connect,
// as when the deadline cuts a redial short: nothing was sent, so each
// failure is definite and retryable.
//
// When expire is set, the second attempt ends the wait's deadline before it
// fails, so the deadline falls after an unanswered attempt whatever the
// machine's speed.
type heldThenDown struct {
	driver.Driver
	calls  int
	expire func()
}

var errDial = errors.New("dial tcp 127.0.0.1:5432: i/o timeout")

func (d *heldThenDown) LeaseAcquire(ctx context.Context, p driver.AcquireParams) (driver.AcquireResult, error) {
	d.calls++
	if d.calls == 1 {
		return d.Driver.LeaseAcquire(ctx, p)
	}
	if d.calls == 2 && d.expire != nil {
		d.expire()
	}
	return driver.AcquireResult{}, errDial
}

// expiringCtx is a context whose deadline passes when expire is called, not
// at a time: a test decides at which step the deadline ends a wait.
type expiringCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiringCtx() *expiringCtx {
	return &expiringCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *expiringCtx) expire() { c.once.Do(func() { close(c.done) }) }

func (c *expiringCtx) Done() <-chan struct{} { return c.done }

func (c *expiringCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (d *heldThenDown) IsServerError(err error) bool {
	return errors.Is(err, errDial) || d.Driver.IsServerError(err)
}

func (d *heldThenDown) IsRetryable(err error) bool {
	return errors.Is(err, errDial) || d.Driver.IsRetryable(err)
}

// When the deadline ends a wait whose last attempt was not answered, the
// error still says the lease was held, from the attempt that was.
func TestAcquireWaitKeepsLastHeld(t *testing.T) {
	ctx := context.Background()
	s := migratedSQLite(t, WithWaitBackoff(5*time.Millisecond, 20*time.Millisecond))
	first, err := s.Acquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The deadline passes during the second attempt, which is not answered:
	// a real timeout (300 ms here once) could pass during the first attempt
	// on a loaded machine, before any ErrHeld was seen.
	wctx := newExpiringCtx()
	fake := &heldThenDown{Driver: s.drv, expire: wctx.expire}
	s.drv = fake
	_, err = s.AcquireWait(wctx, "a", time.Minute)
	if fake.calls < 2 {
		t.Fatalf("only %d attempts", fake.calls)
	}
	var held *HeldError
	if !errors.Is(err, ErrHeld) || !errors.As(err, &held) || held.Fence != first.Token.Fence || !errors.Is(err, errDial) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireWait: %v", err)
	}
	t.Log(err)
}

// lostOnce commits the first acquire and loses its answer and the read that
// would resolve it; later calls are real.
type lostOnce struct {
	driver.Driver
	acquires, gets int
	first          int64 // the fence the first, unanswered, acquire committed
}

func (d *lostOnce) LeaseAcquire(ctx context.Context, p driver.AcquireParams) (driver.AcquireResult, error) {
	d.acquires++
	r, err := d.Driver.LeaseAcquire(ctx, p)
	if d.acquires == 1 && err == nil {
		d.first = r.Fence
		return driver.AcquireResult{}, errConnReset
	}
	return r, err
}

func (d *lostOnce) LeaseGet(ctx context.Context, name string) (driver.Lease, bool, error) {
	d.gets++
	if d.gets == 1 {
		return driver.Lease{}, false, errConnReset
	}
	return d.Driver.LeaseGet(ctx, name)
}

func (d *lostOnce) IsServerError(err error) bool {
	return !errors.Is(err, errConnReset) && d.Driver.IsServerError(err)
}

// A reset connection is transient, as the network drivers classify it.
func (d *lostOnce) IsRetryable(err error) bool {
	return errors.Is(err, errConnReset) || d.Driver.IsRetryable(err)
}

// An AcquireWait attempt that committed without an answer is recognised by
// the next attempt (same owner) and returned, not waited out as a stranger's
// lease for a TTL.
func TestAcquireWaitAdoptsItsOwnLostAttempt(t *testing.T) {
	ctx := context.Background()
	s := migratedSQLite(t, WithWaitBackoff(5*time.Millisecond, 20*time.Millisecond))
	fake := &lostOnce{Driver: s.drv}
	s.drv = fake
	// Far less than the TTL: waiting the orphan out cannot pass.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := s.AcquireWait(wctx, "a", time.Hour)
	if err != nil {
		t.Fatalf("AcquireWait after a lost answer: %v (attempts %d)", err, fake.acquires)
	}
	if fake.acquires != 2 || fake.first == 0 || l.Token.Fence != fake.first {
		t.Fatalf("got fence %d after %d attempts, want the first attempt's fence %d after 2", l.Token.Fence, fake.acquires, fake.first)
	}
	if l.ExpiresAt.IsZero() || time.Until(l.ExpiresAt) < 59*time.Minute {
		t.Fatalf("adopted lease expires at %v", l.ExpiresAt)
	}
	if ok, err := s.IsHeld(ctx, l.Token); !ok || err != nil {
		t.Fatalf("adopted token not held: %v", err)
	}
	// A plain Acquire makes a new owner each call: the lease is held, by us
	// as far as the database can tell, but not by that call.
	if _, err := s.Acquire(ctx, "a", time.Minute); !errors.Is(err, ErrHeld) {
		t.Fatalf("second Acquire: %v", err)
	}
}

// finishLost runs the real completion (if commit) and then loses its
// answer, as when the connection drops after the commit.
type finishLost struct {
	driver.Driver
	commit bool
}

func (d *finishLost) RunFinish(ctx context.Context, p driver.FinishRunParams) (bool, error) {
	if d.commit {
		d.Driver.RunFinish(ctx, p)
	}
	return false, errConnReset
}

func (d *finishLost) IsServerError(err error) bool {
	return !errors.Is(err, errConnReset) && d.Driver.IsServerError(err)
}

// A completion whose answer was lost is settled by reading the run: it
// committed (nil, never "failed" while the database says succeeded), or the
// run ended otherwise (ErrLost); only a run still running leaves it unknown.
// Before, every one of them was ErrAmbiguous, which the runner reports as
// a failed job.
func TestFinishRunWithLostAnswer(t *testing.T) {
	ctx := context.Background()
	s := migratedSQLite(t)
	real := s.drv
	tok, err := s.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	start := func() int64 {
		id, err := s.StartRun(ctx, tok.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	committed := start()
	s.drv = &finishLost{Driver: real, commit: true}
	if err := s.FinishRun(ctx, tok.Token, committed, Completion{Result: "ok"}); err != nil {
		t.Fatalf("committed completion with a lost answer: %v", err)
	}
	s.drv = real
	if r, _ := s.GetRun(ctx, committed); r.Status != RunSucceeded {
		t.Fatalf("run: %+v", r)
	}

	notSent := start()
	s.drv = &finishLost{Driver: real}
	err = s.FinishRun(ctx, tok.Token, notSent, Completion{})
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("completion with a lost answer, run still running: %v; want ErrAmbiguous", err)
	}

	s.drv = real
	if err := s.MarkRunLost(ctx, notSent, tok.Token.Fence, "worker gave up"); err != nil {
		t.Fatal(err)
	}
	s.drv = &finishLost{Driver: real}
	err = s.FinishRun(ctx, tok.Token, notSent, Completion{})
	if !errors.Is(err, ErrLost) || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("completion with a lost answer of a run since marked lost: %v; want ErrLost", err)
	}
}

// TestRunCompletionUnknown: when the completion's answer is lost and the run
// cannot be read back as finished, Run reports Unknown, never Failed (the
// database may say succeeded).
func TestRunCompletionUnknown(t *testing.T) {
	ctx := context.Background()
	s := migratedSQLite(t)
	real := s.drv
	r, err := Run(ctx, s, "job:unknown", func(context.Context) error {
		s.drv = &finishLost{Driver: real} // the completion's answer is lost, nothing committed
		return nil
	}, WithTTL(time.Minute))
	s.drv = real
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != Unknown || !errors.Is(r.Err, ErrAmbiguous) || r.JobErr != nil {
		t.Fatalf("Run with a lost completion answer: %+v; want Unknown wrapping ErrAmbiguous", r)
	}
}
