package torture

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fencepgx"
	"github.com/fencekit/fence/internal/testdb"
	"github.com/fencekit/fence/postgres"
)

// op is one recorded operation: its invocation, return and result.
type op struct {
	ID     int64   `json:"id"`
	Client int     `json:"client"`
	Lease  int     `json:"lease"`
	Kind   opKind  `json:"-"`
	KindS  string  `json:"kind"`
	Fence  int64   `json:"fence,omitempty"` // the token's fence
	Owner  string  `json:"owner,omitempty"` // acquire: the new token's owner; token ops: the token's
	Res    outcome `json:"-"`
	ResS   string  `json:"result"`
	Out    output  `json:"out"`
	Call   int64   `json:"call_ns"`
	Return int64   `json:"return_ns"`
	Err    string  `json:"err,omitempty"`
	API    string  `json:"api,omitempty"`   // write ops: the fence API that made the write
	Shape  string  `json:"shape,omitempty"` // single-statement writes: the SQL shape (shapes.go)
	// Attempts are the Acquire calls an AcquireWait made (seen through a
	// fence.Observer), when Observed: each may have committed a generation
	// of its own, not only the last (see attemptObserver).
	Attempts []attempt `json:"attempts,omitempty"`
	Observed bool      `json:"observed,omitempty"`
	Fault    string    `json:"fault,omitempty"` // a fault injected into this op
	Skewed   bool      `json:"skewed,omitempty"`
}

// Probabilities of the schedule. In-op pauses hold a lease's share lock (on
// SQLite the database write lock) for longer than the TTL, so they are rare;
// the unsafe control pauses more often inside its check-then-write gap so a
// short run is enough to show its violations.
const (
	pPauseAfterAcquire = 0.10
	pPauseInTx         = 0.004
	pPauseUnsafe       = 0.05
	pCancel            = 0.01
	pDropRefused       = 0.6 // drop a refused token (else keep using it, stale)
	pDropReleased      = 0.8
)

// attempt is one Acquire call inside an AcquireWait.
type attempt struct {
	Call   int64  `json:"call_ns"`
	Return int64  `json:"return_ns"`
	Res    string `json:"result"`
	Fence  int64  `json:"fence,omitempty"`
}

type attemptsKey struct{}

// attemptObserver records, on each client store, the Acquire calls made
// under a context that carries an op's attempt list (AcquireWait's). An
// AcquireWait retries transient errors, and an attempt whose outcome is
// unknown may commit a generation under its own owner token before a later
// attempt succeeds or the call gives up: one call, several possible
// acquisitions, which the model and the log checks must both allow for.
// Acquire runs the observer's end in the calling goroutine, so the list
// needs no lock.
type attemptObserver struct{ h *harness }

func (a attemptObserver) Observe(ctx context.Context, op fence.Op, _ string) (context.Context, func(fence.Event)) {
	rec, _ := ctx.Value(attemptsKey{}).(*[]attempt)
	if op != fence.OpAcquire || rec == nil {
		return ctx, func(fence.Event) {}
	}
	call := a.h.now()
	return ctx, func(ev fence.Event) {
		at := attempt{Call: call, Return: a.h.now(), Res: classify(opAcquire, ev.Err).String()}
		if ev.Err == nil {
			at.Fence = ev.Fence
		}
		*rec = append(*rec, at)
	}
}

type epoch struct {
	stop chan struct{}
	wg   sync.WaitGroup
	ops  [][]op // per client
}

func (e *epoch) stopped() bool {
	select {
	case <-e.stop:
		return true
	default:
		return false
	}
}

type client struct {
	id    int
	h     *harness
	rng   *rand.Rand
	store atomic.Pointer[fence.Store]
	clock fence.Clock
	skew  time.Duration
	// tokens[lease] is the token this client believes it holds (zero: none);
	// refused tokens are sometimes kept, to go on trying stale writes.
	tokens     []fence.Token
	forceWrite int // lease to write right after a paused acquire, or -1
	next       chan *epoch
}

type harness struct {
	cfg       Config
	d         fence.Dialect
	sc        schema
	leases    []string
	start     time.Time
	clientDSN string
	adminDSN  string
	inst      instance
	px        *proxy
	admin     *fence.Store
	clients   []*client
	opSeq     atomic.Int64
	stats     *stats
	checker   *checker
	direct    []*leaseFacts
	stopping  atomic.Bool
	restartMu sync.Mutex // held while the database is down (restart fault)
	// barrierMs is the database time the last barrier read once it had
	// found no statement in flight (at the start of the run: its start).
	barrierMs int64
	faultRng  *rand.Rand
	restarts  restartSchedule
	// shapes are the write shapes this server accepts; shapesSkipped says
	// why any other was left out.
	shapes        []string
	shapesSkipped map[string]string
	rollback      *rollbackPlan
	ext           []*extResource
	window        atomic.Int64 // the window clients are running in
	fo            failoverState
	// commits are the committed operations' spans, for the pauses after
	// the partition nemesis's steps (partition.go).
	commits commitSpans
	// binlog, when set, orders the event log by the admin node's binary
	// log (a Galera node; binlog.go).
	binlog *binlogOrder
	// nodes are harness handles on the client DSNs' other servers (the
	// other Galera nodes): the barrier waits for their statements too.
	nodes []*fence.Store
	// nodeWaits counts the barriers that found a statement still running
	// on one of nodes (and none on the admin server).
	nodeWaits int
	// barrierGaveUp counts the barriers that stopped waiting with a
	// statement still running.
	barrierGaveUp int
}

// restartSchedule spaces the restart fault over the time clients run
// (barriers between windows do not count). It was a 1-in-20 coin per fault
// tick, which some seeds never won in a whole CI run: a run asked for
// restarts and tested none. Now the first comes 2-5 s in and the next 4-8 s
// after each, so every run longer than about 5 s of window time has one and
// the seed still picks when.
type restartSchedule struct {
	left time.Duration // window time until the next restart
	init bool
}

// advance counts d of window time and reports whether a restart is due.
func (r *restartSchedule) advance(rng *rand.Rand, d time.Duration) bool {
	if !r.init {
		r.init = true
		r.left = time.Duration(2000+rng.IntN(3000)) * time.Millisecond
	}
	r.left -= d
	if r.left > 0 {
		return false
	}
	r.left = time.Duration(4000+rng.IntN(4000)) * time.Millisecond
	return true
}

func (h *harness) now() int64 { return int64(time.Since(h.start)) }

// Run runs one torture test and returns its result. An error means the run
// could not be carried out (setup failed, the database never came back);
// violations are in the result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	dsn, err := fencedsn.Parse(cfg.DSN)
	if err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, d: dsn.Dialect, stats: newStats(), faultRng: rand.New(rand.NewPCG(cfg.Seed, 1<<32)),
		rollback: &rollbackPlan{rng: rand.New(rand.NewPCG(cfg.Seed, 2<<32))}}
	if cfg.Pgx && h.d != fence.Postgres {
		return nil, fmt.Errorf("torture: the pgx-native path (Pgx, --pgx) needs a PostgreSQL DSN (postgres://…), not %s", h.d)
	}
	if cfg.OldFenceRule && h.d != fence.Postgres {
		return nil, fmt.Errorf("torture: the old-fence-rule control needs a PostgreSQL DSN (its triggers rewrite NEW, which only PostgreSQL's RETURNING reports), not %s", h.d)
	}
	if len(cfg.ClientDSNs) > 0 {
		for _, f := range []string{FaultRestart, FaultProxy, FaultRollback} {
			if cfg.Faults[f] {
				return nil, fmt.Errorf("torture: the %s fault acts on one server; leave it out with several client DSNs", f)
			}
		}
		for _, c := range cfg.ClientDSNs {
			if d, err := fencedsn.Parse(c); err != nil {
				return nil, err
			} else if d.Dialect != h.d {
				return nil, fmt.Errorf("torture: client DSN %s is %s, the admin DSN %s", d.Redacted, d.Dialect, h.d)
			}
		}
	}
	if err := checkFailoverConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.Faults[FaultProxy] && h.d == fence.SQLite {
		return nil, errors.New("torture: the proxy fault needs a networked database (SQLite runs in process); leave it out for sqlite")
	}
	for i := range cfg.Leases {
		h.leases = append(h.leases, fmt.Sprintf("torture-%d", i))
	}
	defer h.cleanup()
	if err := h.setup(ctx); err != nil {
		return nil, err
	}
	return h.run(ctx)
}

// FaultsFor returns faults less those that cannot apply to dsn's database
// (the proxy on SQLite), so that "all" means all that apply.
func FaultsFor(f Faults, dsn string) Faults {
	d, err := fencedsn.Parse(dsn)
	out := Faults{}
	for k, v := range f {
		out[k] = v
	}
	if err == nil && d.Dialect == fence.SQLite {
		delete(out, FaultProxy)
	}
	return out
}

func (h *harness) setup(ctx context.Context) error {
	h.adminDSN = h.cfg.DSN
	if h.cfg.Faults[FaultRestart] && h.d != fence.SQLite {
		in, err := newInstance(ctx, h.d)
		if err != nil {
			return err
		}
		h.inst = in
		h.adminDSN = in.DSN()
	}
	h.clientDSN = h.adminDSN
	if h.cfg.Faults[FaultProxy] {
		upstream, err := hostPort(h.adminDSN)
		if err != nil {
			return err
		}
		if h.px, err = newProxy(upstream); err != nil {
			return err
		}
		h.clientDSN = replaceHost(h.adminDSN, h.px.Addr())
	}
	prefix := testdb.Prefix()
	var err error
	// The admin handle (migration, the harness's tables, the barrier's
	// reads) is always database/sql; only the clients take the pgx path.
	if h.admin, err = h.openStore(ctx, h.adminDSN, prefix, nil, false); err != nil {
		return err
	}
	if _, err := h.admin.Migrate(ctx); err != nil {
		return fmt.Errorf("torture: migrate: %w", err)
	}
	h.sc = newSchema(h.d, prefix)
	galera, useBinlog := false, false
	if h.d == fence.MySQL {
		var err error
		if galera, useBinlog, err = galeraBinlog(ctx, h.admin.DB()); err != nil {
			return fmt.Errorf("torture: asking the server whether it is a Galera node: %w", err)
		}
	}
	if h.cfg.GaleraOldGuard && !useBinlog {
		why := "it is not a Galera node"
		if galera {
			why = "its log_bin or log_slave_updates is off"
		}
		return fmt.Errorf("torture: the Galera old-guard control orders its stale commits by the admin node's binary log, and %s (clusters/galera/galera.sh starts nodes with both on)", why)
	}
	h.sc.binlog = useBinlog
	if err := h.sc.setup(ctx, h.admin.DB(), h.leases); err != nil {
		return err
	}
	if useBinlog {
		if h.binlog, err = newBinlogOrder(ctx, h.admin.DB(), h.adminDSN, h.sc.events); err != nil {
			return err
		}
	}
	if h.cfg.OldFenceRule {
		for _, q := range h.sc.oldRuleDDL() {
			if _, err := h.admin.DB().ExecContext(ctx, q); err != nil {
				return fmt.Errorf("torture: installing the old-fence-rule control's triggers: %w", err)
			}
		}
	}
	for _, d := range otherNodes(h.adminDSN, h.cfg.ClientDSNs) {
		s, err := h.openStore(ctx, d, prefix, nil, false)
		if err != nil {
			return fmt.Errorf("torture: opening the harness's handle on client node %s: %w", d, err)
		}
		h.nodes = append(h.nodes, s)
	}
	h.shapes, h.shapesSkipped = h.sc.probeShapes(ctx, h.admin.DB())
	for range h.leases {
		h.direct = append(h.direct, &leaseFacts{})
		h.ext = append(h.ext, newExtResource())
	}
	for i := range h.cfg.Clients {
		c := &client{id: i, h: h, rng: rand.New(rand.NewPCG(h.cfg.Seed, uint64(i)+1)),
			tokens: make([]fence.Token, len(h.leases)), forceWrite: -1, next: make(chan *epoch, 1), clock: fence.SkewedClock{}}
		if h.cfg.Faults[FaultSkew] && i%2 == 1 {
			// Whole hours either way: a host whose wall clock is simply
			// wrong. Validity is decided by the database clock, so outcomes
			// must not change; the same checkers judge these clients.
			hours := time.Duration(1+c.rng.IntN(12)) * time.Hour
			if c.rng.IntN(2) == 0 {
				hours = -hours
			}
			c.skew = hours
			c.clock = fence.SkewedClock{Offset: hours}
		}
		dsn := h.clientDSN
		if n := len(h.cfg.ClientDSNs); n > 0 {
			dsn = h.cfg.ClientDSNs[i%n]
		}
		s, err := h.openStore(ctx, dsn, prefix, c.clock, h.cfg.Pgx)
		if err != nil {
			return err
		}
		c.store.Store(s)
		h.clients = append(h.clients, c)
	}
	h.checker = newChecker(h)
	return nil
}

// openStore opens one store on dsn, retrying while the database comes up.
// With pgx it is a pgx-native store: its own pgxpool (postgres.NewPool), no
// database/sql handle; closeStore closes the pool with it.
func (h *harness) openStore(ctx context.Context, dsn, prefix string, clock fence.Clock, pgx bool) (*fence.Store, error) {
	opts := []fence.Option{fence.WithPrefix(prefix), fence.WithObserver(attemptObserver{h})}
	if clock != nil {
		opts = append(opts, fence.WithClock(clock))
	}
	var s *fence.Store
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if pgx {
			s, err = openPgxStore(ctx, dsn, opts)
		} else {
			s, err = fencedsn.Open(ctx, dsn, opts...)
		}
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	if pgx {
		return s, nil
	}
	// InTx holds a connection while CheckTx explains a refusal on another.
	s.DB().SetMaxOpenConns(4)
	s.DB().SetMaxIdleConns(4)
	return s, nil
}

// openPgxStore makes a pgxpool from dsn (postgres.NewPoolConfig, so the
// proxy's or the private server's address in dsn is what it dials), pings it
// and opens a store on it with postgres.NewPool and fence.New.
func openPgxStore(ctx context.Context, dsn string, opts []fence.Option) (*fence.Store, error) {
	pc, err := postgres.NewPoolConfig(dsn)
	if err != nil {
		return nil, err
	}
	// As the database/sql stores: fencepgx.InTx holds a connection while
	// fencepgx.CheckTx explains a refusal on another.
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = pool.Ping(pctx)
	cancel()
	if err != nil {
		pool.Close()
		return nil, err
	}
	d, err := postgres.NewPool(pool, "")
	if err != nil {
		pool.Close()
		return nil, err
	}
	s, err := fence.New(ctx, d, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// poolOf is the pgx pool of a pgx-native store, or nil.
func poolOf(s *fence.Store) *pgxpool.Pool {
	if d, ok := s.Driver().(*postgres.Driver); ok {
		return d.Pool()
	}
	return nil
}

// closeStore closes a store and, for a pgx-native one, the pool it was made
// with (a driver from postgres.NewPool leaves the pool to its caller).
func closeStore(s *fence.Store) {
	s.Close()
	if p := poolOf(s); p != nil {
		p.Close()
	}
}

func (h *harness) cleanup() {
	for _, c := range h.clients {
		if s := c.store.Load(); s != nil {
			closeStore(s)
		}
	}
	for _, s := range h.nodes {
		s.Close()
	}
	if h.admin != nil {
		if !h.cfg.Keep && h.sc.p != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			h.sc.drop(ctx, h.admin.DB())
			// Every table Migrate created, the task tables included.
			_ = h.admin.DropTables(ctx)
			cancel()
		}
		h.admin.Close()
	}
	if h.px != nil {
		h.px.Close()
	}
	if h.inst != nil {
		h.inst.Close()
	}
}

func (h *harness) run(ctx context.Context) (*Result, error) {
	h.start = time.Now()
	var wg sync.WaitGroup
	for _, c := range h.clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.loop() }()
	}
	defer func() {
		for _, c := range h.clients {
			close(c.next)
		}
		wg.Wait()
	}()
	progressDone := make(chan struct{})
	go h.progress(progressDone)
	defer close(progressDone)
	h.checker.start()

	init := make([]state, len(h.leases))
	var runErr error
	parts, err := h.startPartitions(ctx)
	if err != nil {
		return nil, err
	}
	if err := retry(ctx, func(ctx context.Context) error {
		t, err := h.admin.Now(ctx)
		h.barrierMs = t.UnixMilli()
		return err
	}); err != nil {
		return nil, fmt.Errorf("torture: reading the database clock: %w", err)
	}
	for w := 0; !h.done(); w++ {
		ep := &epoch{stop: make(chan struct{}), ops: make([][]op, len(h.clients))}
		ep.wg.Add(len(h.clients))
		allDone := make(chan struct{})
		go func() { ep.wg.Wait(); close(allDone) }()
		injDone := make(chan struct{})
		injStop := make(chan struct{})
		var snap sync.WaitGroup
		if h.cfg.Faults[FaultRollback] {
			if d, ok := h.rollback.nextSnapshot(h.cfg.Window); ok {
				snap.Add(1)
				go func() { defer snap.Done(); h.snapshotAfter(d, injStop) }()
			}
		}
		h.window.Store(int64(w))
		go func() { defer close(injDone); h.inject(injStop); snap.Wait() }()
		for _, c := range h.clients {
			c.next <- ep
		}
		t := time.NewTimer(h.cfg.Window)
		select {
		case <-t.C:
		case <-allDone:
		case <-ctx.Done():
		}
		t.Stop()
		h.holdWindow()
		close(ep.stop)
		<-allDone
		close(injStop)
		<-injDone
		next, err := h.barrier(ctx, w, ep, init)
		if err != nil {
			runErr = err
			break
		}
		init = next
		if ctx.Err() != nil {
			break
		}
	}
	h.stopping.Store(true)
	nemFile, nemErr := parts.stop(h)
	h.failoverWait()
	h.checker.finish()
	r := h.result()
	if parts != nil {
		r.NemesisFile, r.NemesisSteps = nemFile, len(parts.rec.Steps)
		r.NetPauses = h.commits.pauses(parts.rec, parts.t0)
		if nemErr != nil {
			r.Errors = append(r.Errors, nemErr.Error())
		}
	}
	if runErr != nil {
		r.Errors = append(r.Errors, runErr.Error())
	}
	return r, nil
}

func (h *harness) done() bool {
	if h.cfg.Ops > 0 && h.opSeq.Load() >= h.cfg.Ops {
		return true
	}
	return h.cfg.Duration > 0 && time.Since(h.start) >= h.cfg.Duration
}

func (c *client) loop() {
	for ep := range c.next {
		for !ep.stopped() && !c.h.done() {
			c.doOp(ep)
		}
		ep.wg.Done()
	}
}

func (c *client) pauseFor() time.Duration {
	ttl := c.h.cfg.TTL
	return ttl + ttl/5 + time.Duration(c.rng.Int64N(int64(ttl)*4/5+1))
}

func (c *client) pickLease() int {
	if c.forceWrite >= 0 {
		return c.forceWrite
	}
	if c.rng.Float64() < 0.7 {
		var held []int
		for i, t := range c.tokens {
			if !t.IsZero() {
				held = append(held, i)
			}
		}
		if len(held) > 0 {
			return held[c.rng.IntN(len(held))]
		}
	}
	return c.rng.IntN(len(c.h.leases))
}

func (c *client) pickKind(li int, tok fence.Token) opKind {
	if c.forceWrite == li && !tok.IsZero() {
		c.forceWrite = -1
		if c.rng.IntN(2) == 0 {
			return opWrite
		}
		return opTxWrite
	}
	c.forceWrite = -1
	r := c.rng.Float64()
	if tok.IsZero() {
		switch {
		case r < 0.64:
			return opAcquire
		case r < 0.65:
			// AcquireWait blocks for up to a TTL, so it is rare; it is the
			// one call that uses the (possibly skewed) application clock.
			return opAcquireWait
		case r < 0.78:
			return opRead
		case r < 0.95:
			return opGet
		default:
			return opRevoke
		}
	}
	switch {
	case r < 0.30:
		return opWrite
	case r < 0.48:
		return opTxWrite
	case r < 0.62:
		return opRenew
	case r < 0.68:
		return opRelease
	case r < 0.74:
		return opIsHeld
	case r < 0.82:
		return opRead
	case r < 0.88:
		return opGet
	case r < 0.95:
		return opAcquire
	case r < 0.97:
		return opRevoke
	case r < 0.975:
		return opAcquireWait
	default:
		return opGet
	}
}

// sleep waits d unless the window ends first.
func sleep(ep *epoch, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ep.stop:
	}
}

func (c *client) doOp(ep *epoch) {
	h := c.h
	li := c.pickLease()
	tok := c.tokens[li]
	kind := c.pickKind(li, tok)
	name := h.leases[li]
	o := op{ID: h.opSeq.Add(1), Client: c.id, Lease: li, Kind: kind, Skewed: c.skew != 0}
	switch kind {
	case opRenew, opRelease, opWrite, opTxWrite, opIsHeld:
		o.Fence, o.Owner = tok.Fence, tok.Owner
	}
	timeout := h.cfg.OpTimeout
	var pause time.Duration
	if h.cfg.Faults[FaultPause] {
		p := 0.0
		switch {
		case h.cfg.Unsafe && (kind == opWrite || kind == opTxWrite):
			p = pPauseUnsafe
		case kind == opTxWrite:
			p = pPauseInTx
		}
		if p > 0 && c.rng.Float64() < p {
			pause = c.pauseFor()
			timeout += pause
			o.Fault = FaultPause
		}
	}
	if kind == opAcquireWait {
		timeout = h.cfg.TTL
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if h.cfg.Faults[FaultCancel] && o.Fault == "" && c.rng.Float64() < pCancel {
		// A deadline of a few milliseconds lands in the middle of the call:
		// the in-process analogue of a dropped connection, and on a network
		// database a cancel mid-commit.
		var cc context.CancelFunc
		ctx, cc = context.WithTimeout(ctx, time.Duration(c.rng.Int64N(int64(3*time.Millisecond))))
		defer cc()
		o.Fault = FaultCancel
	}
	if o.Fault != "" {
		h.stats.fault(o.Fault)
	}
	st := c.store.Load()
	o.Call = h.now()
	var err error
	switch kind {
	case opAcquire, opAcquireWait:
		var l fence.Lease
		if kind == opAcquire {
			l, err = st.Acquire(ctx, name, h.cfg.TTL)
		} else {
			o.Observed = true
			l, err = st.AcquireWait(context.WithValue(ctx, attemptsKey{}, &o.Attempts), name, h.cfg.TTL)
		}
		if err == nil {
			o.Out.Fence, o.Owner = l.Token.Fence, l.Token.Owner
		}
	case opRenew:
		_, err = st.Renew(ctx, tok, h.cfg.TTL)
	case opRelease:
		err = st.Release(ctx, tok)
	case opRevoke:
		o.Out.Fence, err = st.Revoke(ctx, name)
	case opIsHeld:
		o.Out.Valid, err = st.IsHeld(ctx, tok)
	case opWrite, opTxWrite:
		err = c.write(ctx, st, kind, tok, name, o.ID, pause, &o.API, &o.Shape)
	case opRead:
		if p := poolOf(st); p != nil {
			err = p.QueryRow(ctx, h.sc.readSQL(), name).Scan(&o.Out.WFence, &o.Out.Cnt)
		} else {
			err = st.DB().QueryRowContext(ctx, h.sc.readSQL(), name).Scan(&o.Out.WFence, &o.Out.Cnt)
		}
	case opGet:
		var in fence.LeaseInfo
		in, err = st.Get(ctx, name)
		if err == nil {
			o.Out.Found, o.Out.Fence, o.Out.Valid = true, in.Fence, in.State == fence.StateHeld
		} else if errors.Is(err, fence.ErrNotFound) {
			err = nil
		}
	}
	o.Return = h.now()
	o.Res = classify(kind, err)
	o.Out.Res = o.Res
	if err != nil && o.Res != resRefused && o.Res != resHeld {
		o.Err = err.Error() + " [" + typeChain(err) + "]"
	}
	ep.ops[c.id] = append(ep.ops[c.id], o)
	h.stats.record(&o)
	h.noteOp(&o)

	if o.Res == resFailed || o.Res == resAmbiguous && o.Fault == "" {
		// The database is down or the connection broke: back off a little,
		// as a real client would, instead of spinning on refused connects.
		sleep(ep, time.Duration(5+c.rng.IntN(20))*time.Millisecond)
	}
	if o.Res == resOK {
		switch kind {
		case opAcquire, opAcquireWait:
			h.external(li, h.ext[li].see(o.Out.Fence, o.Owner, "handed out"))
		case opWrite, opTxWrite:
			h.external(li, h.ext[li].write(o.Fence, o.Owner))
		}
	}
	switch {
	case (kind == opAcquire || kind == opAcquireWait) && o.Res == resOK:
		c.tokens[li] = fence.Token{Lease: name, Owner: o.Owner, Fence: o.Out.Fence}
		if h.cfg.Faults[FaultPause] && c.rng.Float64() < pPauseAfterAcquire {
			// The stale-worker case: freeze between acquire and write for
			// longer than the TTL, then write with the token regardless.
			h.stats.fault(FaultPause)
			sleep(ep, c.pauseFor())
			c.forceWrite = li
		}
	case o.Res == resRefused && (kind != opIsHeld || !o.Out.Valid):
		if c.rng.Float64() < pDropRefused {
			c.tokens[li] = fence.Token{}
		}
	case kind == opRelease && o.Res == resOK:
		if c.rng.Float64() < pDropReleased {
			c.tokens[li] = fence.Token{}
		}
	}
}

// external reports a violation the external resource found.
func (h *harness) external(li int, detail string) {
	if detail == "" {
		return
	}
	w, at := int(h.window.Load()), secs(h.now())
	h.checker.violation(Violation{Check: "external: fence reused (resource)", Window: w, Lease: h.leases[li], Detail: detail, From: at, To: at})
}

// pickShape draws a single statement's shape: the plain UPDATE half the
// time, else one of the others this server accepts.
func (c *client) pickShape() string {
	if len(c.h.shapes) == 0 || c.rng.IntN(2) == 0 {
		return shapePlain
	}
	return c.h.shapes[c.rng.IntN(len(c.h.shapes))]
}

// execShape runs one fenced single statement of shape through exec (Store.Exec
// or fencepgx.Exec), after the shape's unfenced preparation, if any, on the
// store's own handle (pool for a pgx-native store).
func (c *client) execShape(ctx context.Context, st *fence.Store, shape string, tok fence.Token, name string, id int64,
	exec func(q string, args ...any) (int64, error)) error {
	ss := c.h.sc.shapeSQL(shape, tok, name, id)
	if ss.pre != "" {
		var err error
		if p := poolOf(st); p != nil {
			_, err = p.Exec(ctx, ss.pre, ss.preArgs...)
		} else {
			_, err = st.DB().ExecContext(ctx, ss.pre, ss.preArgs...)
		}
		if err != nil {
			// The fenced statement was never sent: a definite failure,
			// whatever became of the queued item (nothing consumes it).
			return fmt.Errorf("torture: queueing the item the DELETE shape consumes: %w", err)
		}
	}
	_, err := exec(ss.q, ss.args...)
	return err
}

// write is a fenced single statement (Store.Exec) or a fenced transaction
// (Store.InTx), or, in unsafe mode, the naive design: IsHeld in Go, then the
// same writes without the fence. A pgx-native store (Config.Pgx) writes
// through pgx's own API instead (pgxWrite).
// api receives the name of the API used.
func (c *client) write(ctx context.Context, st *fence.Store, kind opKind, tok fence.Token, name string, id int64, pause time.Duration, api, shape *string) error {
	sc := c.h.sc
	k := "stmt"
	if kind == opTxWrite {
		k = "tx"
	}
	if c.h.cfg.Unsafe {
		*api = "unsafe"
		if poolOf(st) != nil {
			*api = "unsafe-pgx"
		}
		ok, err := st.IsHeld(ctx, tok)
		if err != nil {
			return err // a failed read: nothing was written
		}
		if !ok {
			return &fence.LostError{Lease: tok.Lease, Fence: tok.Fence, Op: "write"}
		}
		if pause > 0 {
			time.Sleep(pause) // the race: a takeover lands here
		}
		if p := poolOf(st); p != nil {
			return unsafePgxWrite(ctx, p, sc, kind, tok, name, id, k)
		}
		if kind == opWrite {
			if _, err := st.DB().ExecContext(ctx, sc.writeSQL(false), tok.Fence, id, k, name); err != nil {
				return &fence.AmbiguousError{Op: "write", Lease: name, Err: err}
			}
			return nil
		}
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sc.writeSQL(false), tok.Fence, id, k, name); err != nil {
			tx.Rollback()
			return err
		}
		if _, err := tx.ExecContext(ctx, sc.sideSQL(), name); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return &fence.AmbiguousError{Op: "commit", Lease: name, Err: err}
		}
		return nil
	}
	if c.h.cfg.GaleraOldGuard {
		return c.oldGuardWrite(ctx, st, kind, tok, name, id, k, pause, api)
	}
	if kind == opWrite {
		*shape = c.pickShape()
	}
	if p := poolOf(st); p != nil {
		return c.pgxWrite(ctx, st, p, kind, tok, name, id, k, pause, api, *shape)
	}
	if kind == opWrite {
		*api = "Exec"
		return c.execShape(ctx, st, *shape, tok, name, id, func(q string, args ...any) (int64, error) {
			return st.Exec(ctx, tok, q, args...)
		})
	}
	*api = "InTx"
	return st.InTx(ctx, tok, func(tx *sql.Tx) error {
		if pause > 0 {
			time.Sleep(pause) // between CheckTx and the commit
		}
		if _, err := tx.ExecContext(ctx, sc.writeSQL(false), tok.Fence, id, k, name); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, sc.sideSQL(), name)
		return err
	})
}

// pgxWrite is the fenced write of a pgx-native store, half and half by the
// client's schedule: a single statement is Store.Exec or fencepgx.Exec on
// the pool; a transaction is fencepgx.InTx (the protected row's UPDATE
// unfenced, as in InTx: the share lock fences it), or a pgx.Tx of the
// harness's own, checked with fencepgx.CheckTx, whose UPDATE goes through
// fencepgx.Exec with {{fence}} and whose commit the harness reports itself.
func (c *client) pgxWrite(ctx context.Context, st *fence.Store, p *pgxpool.Pool, kind opKind, tok fence.Token, name string, id int64, k string, pause time.Duration, api *string, shape string) error {
	sc := c.h.sc
	if kind == opWrite {
		if c.rng.IntN(2) == 0 {
			*api = "Exec"
			return c.execShape(ctx, st, shape, tok, name, id, func(q string, args ...any) (int64, error) {
				return st.Exec(ctx, tok, q, args...)
			})
		}
		*api = "fencepgx.Exec"
		return c.execShape(ctx, st, shape, tok, name, id, func(q string, args ...any) (int64, error) {
			return fencepgx.Exec(ctx, st, p, tok, q, args...)
		})
	}
	if c.rng.IntN(2) == 0 {
		*api = "fencepgx.InTx"
		return fencepgx.InTx(ctx, st, poolOf(st), tok, func(tx pgx.Tx) error {
			if pause > 0 {
				time.Sleep(pause) // between fencepgx.CheckTx and the commit
			}
			if _, err := tx.Exec(ctx, sc.writeSQL(false), tok.Fence, id, k, name); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sc.sideSQL(), name)
			return err
		})
	}
	*api = "fencepgx.CheckTx+Exec"
	tx, err := p.Begin(ctx)
	if err != nil {
		return err // nothing began: a definite failure
	}
	// Until Commit is sent nothing can commit: an error before it is
	// definite (a torn connection aborts the transaction on the server).
	rollback := func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }
	if err := fencepgx.CheckTx(ctx, st, tx, tok); err != nil {
		rollback()
		return err
	}
	if pause > 0 {
		time.Sleep(pause) // between fencepgx.CheckTx and the commit
	}
	if _, err := fencepgx.Exec(ctx, st, tx, tok, sc.writeSQL(true), tok.Fence, id, k, name); err != nil {
		rollback()
		return err
	}
	if _, err := tx.Exec(ctx, sc.sideSQL(), name); err != nil {
		rollback()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		// The COMMIT may have been applied before the answer was lost.
		return &fence.AmbiguousError{Op: "commit", Lease: name, Err: err}
	}
	return nil
}

// oldGuardWrite is the Galera control's write (Config.GaleraOldGuard): the
// protected row's UPDATE with the single-statement share-lock guard that
// Store.Fenced builds (UPDATE … AND EXISTS (… LOCK IN SHARE MODE)), alone
// or as the first statement of a transaction with the side row, without
// the lease-row write fence's Galera guard adds. No matched row is the
// guard's refusal; every other error is reported as ambiguous, which the
// checkers read as "either".
func (c *client) oldGuardWrite(ctx context.Context, st *fence.Store, kind opKind, tok fence.Token, name string, id int64, k string, pause time.Duration, api *string) error {
	sc := c.h.sc
	*api = "old-guard"
	q, args, err := st.Fenced(tok, sc.writeSQL(true), tok.Fence, id, k, name)
	if err != nil {
		return err
	}
	refused := &fence.LostError{Lease: tok.Lease, Fence: tok.Fence, Op: "write"}
	if kind == opWrite {
		res, err := st.DB().ExecContext(ctx, q, args...)
		if err != nil {
			return &fence.AmbiguousError{Op: "write", Lease: name, Err: err}
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return refused
		}
		return nil
	}
	*api = "old-guard-tx"
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		tx.Rollback()
		return &fence.AmbiguousError{Op: "write", Lease: name, Err: err}
	}
	if n, _ := res.RowsAffected(); n == 0 {
		tx.Rollback()
		return refused
	}
	if pause > 0 {
		time.Sleep(pause) // between the guard and the commit
	}
	if _, err := tx.ExecContext(ctx, sc.sideSQL(), name); err != nil {
		tx.Rollback()
		return &fence.AmbiguousError{Op: "write", Lease: name, Err: err}
	}
	if err := tx.Commit(); err != nil {
		return &fence.AmbiguousError{Op: "commit", Lease: name, Err: err}
	}
	return nil
}

// unsafePgxWrite is the unsafe control's unfenced write on a pgx pool.
func unsafePgxWrite(ctx context.Context, p *pgxpool.Pool, sc schema, kind opKind, tok fence.Token, name string, id int64, k string) error {
	if kind == opWrite {
		if _, err := p.Exec(ctx, sc.writeSQL(false), tok.Fence, id, k, name); err != nil {
			return &fence.AmbiguousError{Op: "write", Lease: name, Err: err}
		}
		return nil
	}
	tx, err := p.Begin(ctx)
	if err != nil {
		return err
	}
	rollback := func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }
	if _, err := tx.Exec(ctx, sc.writeSQL(false), tok.Fence, id, k, name); err != nil {
		rollback()
		return err
	}
	if _, err := tx.Exec(ctx, sc.sideSQL(), name); err != nil {
		rollback()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return &fence.AmbiguousError{Op: "commit", Lease: name, Err: err}
	}
	return nil
}

// classify maps an operation's error to the model's outcome. Anything fence
// reports as ErrAmbiguous may have committed; every other error of a write
// is one fence (or the database) says did not take effect.
func classify(kind opKind, err error) outcome {
	switch {
	case err == nil:
		return resOK
	case kind == opAcquireWait:
		// AcquireWait retries transient errors itself, and an attempt whose
		// connection dropped may have acquired before the retry: a failed
		// AcquireWait is always "maybe" (its recorded attempts say which
		// calls may have committed; see attemptObserver).
		return resAmbiguous
	case errors.Is(err, fence.ErrAmbiguous):
		return resAmbiguous
	case errors.Is(err, fence.ErrNoMatch):
		return resNoMatch
	case errors.Is(err, fence.ErrLost):
		return resRefused
	case errors.Is(err, fence.ErrHeld):
		return resHeld
	case errors.Is(err, fence.ErrNotFound):
		return resNotFound
	}
	return resFailed
}

// inject runs the fault schedule of one window until stop.
func (h *harness) inject(stop chan struct{}) {
	f := h.cfg.Faults
	var kinds []string
	if f[FaultProxy] && h.px != nil {
		kinds = append(kinds, "proxy-reset", "proxy-blackhole", "proxy-latency")
	}
	restart := f[FaultRestart]
	if len(kinds) == 0 && !restart && h.cfg.FailoverCmd == "" {
		return
	}
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-stop:
			return false
		}
	}
	rng := h.faultRng
	began := time.Now()
	for {
		tick := time.Duration(100+rng.IntN(400)) * time.Millisecond
		if !wait(tick) {
			break
		}
		// A restart about every 6 s: each costs the clients a second or so
		// of refused connections and crash recovery.
		if restart && h.restarts.advance(rng, tick) {
			h.stats.fault("restart")
			if err := h.restart(); err != nil {
				h.stats.error(err)
			}
			continue
		}
		if h.failoverDue(tick, time.Since(began)) {
			if err := h.failover(); err != nil {
				h.stats.error(err)
			}
			continue
		}
		if len(kinds) == 0 {
			continue
		}
		k := kinds[rng.IntN(len(kinds))]
		h.stats.fault(k)
		switch k {
		case "proxy-reset":
			h.px.Reset()
		case "proxy-blackhole":
			h.px.BlackHole()
			// Shorter and longer than the TTL; up to half the call timeout.
			wait(time.Duration(100+rng.IntN(int(h.cfg.OpTimeout/time.Millisecond)/2)) * time.Millisecond)
			h.px.Unblack()
		case "proxy-latency":
			h.px.SetLatency(time.Duration(1+rng.IntN(30)) * time.Millisecond)
			wait(time.Duration(200+rng.IntN(800)) * time.Millisecond)
			h.px.SetLatency(0)
		}
	}
	if h.px != nil {
		h.px.Heal()
	}
}

// restart kills the database and starts it again (SQLite: every client's
// store is closed under it and reopened).
func (h *harness) restart() error {
	h.restartMu.Lock()
	defer h.restartMu.Unlock()
	if h.d == fence.SQLite {
		for _, c := range h.clients {
			s, err := h.openStore(context.Background(), h.clientDSN, h.sc.p, c.clock, h.cfg.Pgx)
			if err != nil {
				return err
			}
			old := c.store.Swap(s)
			closeStore(old)
		}
		return nil
	}
	if err := h.inst.Crash(); err != nil {
		return err
	}
	time.Sleep(time.Duration(50+h.faultRng.IntN(300)) * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return h.inst.Start(ctx)
}

// retry runs fn until it succeeds or a minute has passed: the harness's own
// reads must survive a restart or a connection the proxy reset.
func retry(ctx context.Context, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := fn(c)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitInFlight waits (up to 10 s) until no statement on the harness's tables
// is running on the admin server nor on any other node the clients use: an
// orphan of a call its client gave up on (a cancel, the call timeout) runs
// on and may commit after the barrier. On a Galera cluster each node's
// processlist shows only its own sessions, and before the other nodes were
// asked an orphan on node 2 or 3 (an acquire stuck behind the apply lag)
// committed after the barrier had read the binary log: the next window
// logged it with an instant before its start, a "harness barrier"
// violation. A node that cannot be asked (SIGKILLed, rejoining) has no
// client statement running; a write set it replicated before it died is
// ordered before the causal read of the binary log (binlog.go). Waiting too
// little can only make the barrier check fail, never hide a defect.
func (h *harness) waitInFlight(ctx context.Context) error {
	q := h.sc.activeSQL()
	if q == "" {
		return nil
	}
	time.Sleep(50 * time.Millisecond) // delayed chunks (latency ≤ 30ms) land
	// On Galera up to a minute: there an orphan also waits for its causal
	// read or its commit while a killed node is evicted or flow control
	// holds the cluster, and a CI machine at load average 15-28 can stretch
	// that past the 10 s that stay the limit elsewhere. A barrier that
	// gives up is counted in the summary: its window may then report a
	// "harness barrier" violation.
	limit := 10 * time.Second
	if h.binlog != nil {
		limit = time.Minute
	}
	deadline := time.Now().Add(limit)
	counted := false
	for time.Now().Before(deadline) {
		var n int
		err := retry(ctx, func(ctx context.Context) error {
			return h.admin.DB().QueryRowContext(ctx, q, h.sc.p).Scan(&n)
		})
		if err != nil {
			return err
		}
		admin := n
		for _, nd := range h.nodes {
			if n > 0 {
				break
			}
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			var m int
			if err := nd.DB().QueryRowContext(c, q, h.sc.p).Scan(&m); err == nil {
				n += m
			}
			cancel()
		}
		if n > admin && !counted {
			counted = true
			h.nodeWaits++
		}
		if n == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.barrierGaveUp++
	return nil
}

// otherNodes returns the client DSNs that name a server other than the
// admin DSN's (by host and port), each once: the nodes whose statements
// the barrier must wait for besides the admin server's own.
func otherNodes(admin string, clients []string) []string {
	seen := map[string]bool{}
	if hp, err := hostPort(admin); err == nil {
		seen[hp] = true
	}
	var out []string
	for _, d := range clients {
		hp, err := hostPort(d)
		if err != nil || seen[hp] {
			continue
		}
		seen[hp] = true
		out = append(out, d)
	}
	return out
}

// barrier ends window w: with every client quiesced and every fault healed,
// it waits until no orphaned statement of a dropped connection is still
// running, reads each lease's state, logged events and protected value, and
// hands the window to the checkers. It returns the next window's initial
// states.
func (h *harness) barrier(ctx context.Context, w int, ep *epoch, init []state) ([]state, error) {
	end := h.now()
	// A restart in progress finishes first: taking and dropping the lock
	// waits for it.
	h.restartMu.Lock()
	//lint:ignore SA2001 the empty section is the wait
	h.restartMu.Unlock()
	if h.px != nil {
		h.px.Heal()
	}
	if err := h.waitInFlight(ctx); err != nil {
		return nil, fmt.Errorf("torture: barrier %d: %w", w, err)
	}
	// The database time once nothing is in flight: every lease event of this
	// window ran before it and every one of the next window after it. An
	// event outside that range is a statement the wait above missed.
	var nowMs int64
	if err := retry(ctx, func(ctx context.Context) error {
		t, err := h.admin.Now(ctx)
		nowMs = t.UnixMilli()
		return err
	}); err != nil {
		return nil, fmt.Errorf("torture: barrier %d: reading the database clock: %w", w, err)
	}
	if h.binlog != nil {
		if err := retry(ctx, func(ctx context.Context) error { return h.binlog.read(ctx, h.admin.DB()) }); err != nil {
			return nil, fmt.Errorf("torture: barrier %d: reading the commit order from the binary log: %w", w, err)
		}
	}
	span := [2]int64{h.barrierMs, nowMs}
	lossy := h.takeFailover() && h.cfg.FailoverLossy
	h.barrierMs = nowMs
	held := map[fence.Token]bool{}
	for _, c := range h.clients {
		for _, t := range c.tokens {
			if !t.IsZero() {
				held[t] = true
			}
		}
	}
	win := &window{index: w, start: -1, end: end, init: init, ops: make([][]op, len(h.leases)), res: make([]resolution, len(h.leases))}
	for _, cops := range ep.ops {
		for _, o := range cops {
			if win.start < 0 || o.Call < win.start {
				win.start = o.Call
			}
			win.ops[o.Lease] = append(win.ops[o.Lease], o)
		}
	}
	next := make([]state, len(h.leases))
	for li, name := range h.leases {
		b := op{ID: -int64(w*len(h.leases) + li + 1), Client: len(h.clients), Lease: li, Kind: opBarrier, Res: resOK}
		b.Call = h.now()
		var info fence.LeaseInfo
		var events []event
		var txc int64
		err := retry(ctx, func(ctx context.Context) error {
			var err error
			info, err = h.admin.Get(ctx, name)
			b.Out.Found = err == nil
			if errors.Is(err, fence.ErrNotFound) {
				err = nil
			}
			if err != nil {
				return err
			}
			if err := h.admin.DB().QueryRowContext(ctx, h.sc.readSQL(), name).Scan(&b.Out.WFence, &b.Out.Cnt); err != nil {
				return err
			}
			if h.binlog != nil {
				events, err = h.binlog.eventsOf(ctx, h.sc, h.admin.DB(), name, h.direct[li].seq)
			} else {
				events, err = h.sc.eventsSince(ctx, h.admin.DB(), name, h.direct[li].seq)
			}
			if err != nil {
				return err
			}
			txc, err = h.sc.txCount(ctx, h.admin.DB(), name)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("torture: barrier %d: reading lease %s: %w", w, name, err)
		}
		if h.binlog != nil {
			h.binlog.take(name)
		}
		b.Return = h.now()
		if b.Out.Found {
			b.Out.Fence, b.Out.Valid = info.Fence, info.State == fence.StateHeld
		}
		b.Out.Res = resOK
		win.ops[li] = append(win.ops[li], b)
		next[li] = state{Fence: b.Out.Fence, Valid: b.Out.Valid, WFence: b.Out.WFence, Cnt: b.Out.Cnt,
			Orphan: b.Out.Found && !held[fence.Token{Lease: name, Owner: info.Owner, Fence: info.Fence}]}
		if lossy {
			if err := h.resyncAfterLossyFailover(ctx, w, li, b.Out.Cnt, txc); err != nil {
				return nil, err
			}
			continue
		}
		vs := h.direct[li].check(h, w, li, win.ops[li], events, txc, b.Out.Cnt, span, &win.res[li])
		if len(vs) > 0 {
			file := h.checker.dumpDirect(win, li, events, span)
			for _, v := range vs {
				v.File = file
				h.checker.violation(v)
			}
		}
	}
	if h.cfg.Faults[FaultRollback] {
		if due, shift, snapMs := h.rollback.restoreDue(); due {
			if err := h.doRollback(ctx, w, next, held, shift, snapMs); err != nil {
				return nil, err
			}
		}
	}
	if !lossy {
		h.checker.submit(win)
	}
	h.stats.windows.Add(1)
	return next, nil
}

// hostPort returns the host:port a DSN connects to.
func hostPort(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	if u.Port() == "" {
		if strings.HasPrefix(u.Scheme, "postgres") {
			return u.Hostname() + ":5432", nil
		}
		return u.Hostname() + ":3306", nil
	}
	return u.Host, nil
}

func replaceHost(dsn, addr string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Host = addr
	return u.String()
}

// typeChain names the error's types down its Unwrap chain, so a dumped
// history says exactly what the driver returned.
func typeChain(err error) string {
	var b strings.Builder
	for e := err; e != nil; e = errors.Unwrap(e) {
		if b.Len() > 0 {
			b.WriteString(" > ")
		}
		fmt.Fprintf(&b, "%T", e)
	}
	return b.String()
}
