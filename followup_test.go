package fence

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fence/internal/driver"
	"github.com/fencekit/fence/internal/testdb"
)

// stallProxy forwards TCP to a database until black-holed: from then on it
// drops every byte both ways, on open connections and new ones alike, and
// closes nothing, as a network partition does.
type stallProxy struct {
	ln    net.Listener
	up    string
	black atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newStallProxy(t *testing.T, upstream string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, up: upstream}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.up)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

func (p *stallProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.black.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (p *stallProxy) blackHole() { p.black.Store(true) }

func (p *stallProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// stalledStores opens, per network database, a migrated store through a
// stall proxy and a second store on the same tables straight to the server.
func stalledStores(t *testing.T, fn func(t *testing.T, s, direct *Store, p *stallProxy)) {
	for _, db := range []struct{ name, dsn string }{
		{"postgres", testdb.PostgresDSN()},
		{"mysql", testdb.MySQLDSN()},
	} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			prefix := WithPrefix(testdb.Prefix())
			direct, err := testOpen(ctx, db.dsn, prefix)
			if err != nil {
				if testdb.Required() {
					t.Fatal(err)
				}
				t.Skip(err)
			}
			t.Cleanup(func() {
				direct.DropTables(context.Background())
				direct.Close()
			})
			if _, err := direct.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(db.dsn)
			if err != nil {
				t.Fatal(err)
			}
			p := newStallProxy(t, u.Host)
			u.Host = p.ln.Addr().String()
			s, err := testOpen(ctx, u.String(), prefix)
			if err != nil {
				t.Fatal(err)
			}
			// Registered after the proxy's cleanup, so it runs before it:
			// nothing waits on a black hole by then.
			t.Cleanup(func() { go s.Close() })
			fn(t, s, direct, p)
		})
	}
}

// within runs call and fails t unless it returns within limit; a call that
// never returns (the old unbounded follow-up read) is reported, not waited
// for.
func within(t *testing.T, limit time.Duration, call func() error) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(limit + 20*time.Second):
		t.Fatalf("the call had not returned %v after its deadline of %v", 20*time.Second, limit)
		return 0, nil
	}
}

// slack is what a call may take past its deadline: the detached grace of a
// follow-up read, and a loaded machine.
const slack = 3 * time.Second

// A refused fenced write is explained by a read of the lease. With the
// network stalled after the refusal, the call still returns within its
// deadline (it blocked until the TCP timeout, 20 s and more, on the old
// code, whose follow-up read ignored the deadline).
func TestRefusedWriteFollowUpHonoursDeadline(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	stalledStores(t, func(t *testing.T, s, direct *Store, p *stallProxy) {
		ctx := context.Background()
		table := testdb.WorkTable(t, s.Prefix(), func(ctx context.Context, q string) error { _, err := direct.DB().ExecContext(ctx, q); return err })
		if _, err := direct.DB().ExecContext(ctx, "INSERT INTO "+table+" (id, v) VALUES (1, 0)"); err != nil {
			t.Fatal(err)
		}
		a, err := s.Acquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// Warm the store's pool, so the follow-up meets an open connection.
		if ok, err := s.IsHeld(ctx, a.Token); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if _, err := direct.Revoke(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		const deadline = 2 * time.Second
		took, err := within(t, deadline, func() error {
			wctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			_, err := s.ExecIn(wctx, stallAfter{direct.DB(), p}, a.Token,
				s.Rebind("UPDATE "+table+" SET v = v + 1 WHERE id = ? AND {{fence}}"), 1)
			return err
		})
		t.Logf("refused write with the network stalled after the refusal: %v after %v", err, took)
		if took > deadline+slack {
			t.Errorf("returned after %v, deadline %v", took, deadline)
		}
		if !errors.Is(err, ErrLost) {
			t.Errorf("refused write: %v; want ErrLost", err)
		}
	})
}

// stallAfter runs the statement on a direct handle, then stalls the proxy.
type stallAfter struct {
	e Execer
	p *stallProxy
}

func (s stallAfter) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	defer s.p.blackHole()
	return s.e.ExecContext(ctx, q, args...)
}

// stallingDriver stalls the proxy after the first call of the methods
// named.
type stallingDriver struct {
	driver.Driver
	p        *stallProxy
	acquires atomic.Int32
}

func (d *stallingDriver) RunFinish(ctx context.Context, p driver.FinishRunParams) (bool, error) {
	defer d.p.blackHole()
	return d.Driver.RunFinish(ctx, p)
}

func (d *stallingDriver) LeaseAcquire(ctx context.Context, p driver.AcquireParams) (driver.AcquireResult, error) {
	if d.acquires.Add(1) == 1 {
		defer d.p.blackHole()
	}
	return d.Driver.LeaseAcquire(ctx, p)
}

// A refused completion reads the run and the lease to say why, and marks
// the run lost: within the caller's deadline when the network stalls after
// the refusal (unbounded before).
func TestRefusedFinishFollowUpHonoursDeadline(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	stalledStores(t, func(t *testing.T, s, direct *Store, p *stallProxy) {
		ctx := context.Background()
		a, err := s.Acquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		id, err := s.StartRun(ctx, a.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := direct.Revoke(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		s.drv = &stallingDriver{Driver: s.drv, p: p}
		const deadline = 2 * time.Second
		took, err := within(t, deadline, func() error {
			fctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			return s.FinishRun(fctx, a.Token, id, Completion{})
		})
		t.Logf("refused completion with the network stalled after the refusal: %v after %v", err, took)
		if took > deadline+slack {
			t.Errorf("returned after %v, deadline %v", took, deadline)
		}
		if !errors.Is(err, ErrLost) {
			t.Errorf("refused completion: %v; want ErrLost", err)
		}
	})
}

// AcquireWait with a deadline during an outage returns at its deadline, and
// its error still says who held the lease (ErrHeld), as its doc promises.
// Before, the unanswered attempt's detached 5 s read made it return after
// 6–11 s, and the error was the attempt's alone.
func TestAcquireWaitDeadlineDuringOutage(t *testing.T) {
	t.Parallel() // it waits on leases and clocks, not the CPU
	stalledStores(t, func(t *testing.T, s, direct *Store, p *stallProxy) {
		ctx := context.Background()
		holder, err := direct.Acquire(ctx, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		s.drv = &stallingDriver{Driver: s.drv, p: p}
		// Poll often, so the attempts after the first meet the outage.
		s.wait = waitConfig{min: 25 * time.Millisecond, max: 100 * time.Millisecond}
		const deadline = 1200 * time.Millisecond
		took, err := within(t, deadline, func() error {
			wctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			_, err := s.AcquireWait(wctx, "job", time.Minute)
			return err
		})
		t.Logf("AcquireWait during an outage: %v after %v", err, took)
		if took > deadline+slack {
			t.Errorf("returned after %v, deadline %v", took, deadline)
		}
		var held *HeldError
		if !errors.As(err, &held) || held.Fence != holder.Token.Fence || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("AcquireWait: %v; want ErrHeld (fence %d) and the deadline", err, holder.Token.Fence)
		}
	})
}
