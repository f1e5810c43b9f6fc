package peers

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/bench"
)

//go:embed queries
var queries embed.FS

// query returns the statement queries/<dialect>/<name>.sql with {{table}}
// replaced by table.
func query(d fence.Dialect, name, table string) (string, error) {
	b, err := queries.ReadFile("queries/" + string(d) + "/" + name + ".sql")
	if err != nil {
		return "", fmt.Errorf("peers: no %s statement %s: %w", d, name, err)
	}
	return strings.ReplaceAll(string(b), "{{table}}", table), nil
}

// ddl returns a CREATE statement without its leading comment lines, which
// the engine reads to know which table to drop at the end.
func ddl(d fence.Dialect, name, table string) (string, error) {
	q, err := query(d, name, table)
	if err != nil {
		return "", err
	}
	for strings.HasPrefix(q, "--") {
		_, q, _ = strings.Cut(q, "\n")
	}
	return q, nil
}

// errNoRenew is returned by a locker whose locks last as long as the
// session: there is nothing to renew.
var errNoRenew = errors.New("a session lock has nothing to renew: it lasts as long as the session that holds it")

// locker is one client of a peer's lock: one holder identity (and, for
// session locks, one pinned connection).
type locker interface {
	// tryLock takes name for ttl if it is free; false if another holds it.
	tryLock(ctx context.Context, name string) (bool, error)
	// unlock gives up name, which this client holds.
	unlock(ctx context.Context, name string) error
	// renew extends name, which this client holds; false if it no longer
	// does.
	renew(ctx context.Context, name string) (bool, error)
	close()
}

// ttl is the lease of every held lock: long enough never to run out during
// a measurement.
const ttl = time.Hour

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// fenceLocker is fence itself, through the Store every case uses.
type fenceLocker struct {
	s    *fence.Store
	mu   sync.Mutex
	held map[string]fence.Token
}

func newFence(_ context.Context, e *bench.Env, _ any) (locker, error) {
	return &fenceLocker{s: e.Store, held: map[string]fence.Token{}}, nil
}

func (f *fenceLocker) tryLock(ctx context.Context, name string) (bool, error) {
	l, err := f.s.Acquire(ctx, name, ttl)
	if errors.Is(err, fence.ErrHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	f.held[name] = l.Token
	f.mu.Unlock()
	return true, nil
}

func (f *fenceLocker) token(name string) (fence.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.held[name]
	if !ok {
		return t, fmt.Errorf("peers: fence: %s is not held by this client", name)
	}
	return t, nil
}

func (f *fenceLocker) unlock(ctx context.Context, name string) error {
	t, err := f.token(name)
	if err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.held, name)
	f.mu.Unlock()
	return f.s.Release(ctx, t)
}

func (f *fenceLocker) renew(ctx context.Context, name string) (bool, error) {
	t, err := f.token(name)
	if err != nil {
		return false, err
	}
	_, err = f.s.Renew(ctx, t, ttl)
	if errors.Is(err, fence.ErrLost) {
		return false, nil
	}
	return err == nil, err
}

func (f *fenceLocker) close() {}

// stmts are prepared statements, closed together.
type stmts map[string]*sql.Stmt

func prepare(ctx context.Context, e *bench.Env, table string, names ...string) (stmts, error) {
	st := stmts{}
	for _, n := range names {
		q, err := query(e.Dialect, n, table)
		if err != nil {
			st.close()
			return nil, err
		}
		if st[n], err = e.DB.PrepareContext(ctx, q); err != nil {
			st.close()
			return nil, fmt.Errorf("peers: prepare %s: %w", n, err)
		}
	}
	return st, nil
}

func (st stmts) close() {
	for _, s := range st {
		s.Close()
	}
}

func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// shedLock is a ShedLock-shaped lease (JdbcTemplateLockProvider with
// usingDbTime): one row per name, inserted once per process; after that
// lock, extend and unlock are single-table UPDATEs by the database's clock.
// No fence token; durable.
type shedLock struct {
	st       stmts
	dialect  fence.Dialect
	inserted sync.Map // ShedLock's per-process record of names it inserted
}

func newShedLockShared(ctx context.Context, e *bench.Env) (any, error) {
	t := e.Table("shedlock")
	q, err := ddl(e.Dialect, "shedlock_create", t)
	if err != nil {
		return nil, err
	}
	if err := e.DDL(ctx, q); err != nil {
		return nil, err
	}
	st, err := prepare(ctx, e, t, "shedlock_insert", "shedlock_lock", "shedlock_extend", "shedlock_unlock")
	if err != nil {
		return nil, err
	}
	return &shedLock{st: st, dialect: e.Dialect}, nil
}

// ttlArg is the TTL as each dialect's statements take it.
func (s *shedLock) ttlArg(d time.Duration) any {
	switch s.dialect {
	case fence.Postgres:
		return fmt.Sprintf("%d milliseconds", d.Milliseconds())
	case fence.MySQL:
		return d.Microseconds()
	}
	return d.Milliseconds()
}

type shedLockClient struct {
	s  *shedLock
	by string
	// renews lengthens each extension by 1 ms more than the last. A renew
	// that sets lock_until to the value it already has (two renews in the
	// same millisecond, lock_until being now + ttl at millisecond
	// resolution) changes no byte of the row: SQLite then writes no page
	// and syncs nothing, and InnoDB logs nothing, so the "renew" costs a
	// read. Measured on SQLite: 14-20 µs against 170-210 µs for a renew
	// that writes. A real renew, seconds after the last, always writes.
	// An extension that grows by 1 ms per renew cannot repeat a value: the
	// clock never goes back to make up for it (alternating two lengths
	// does repeat one when the clock moves by exactly their difference).
	renews atomic.Int64
}

func newShedLock(_ context.Context, _ *bench.Env, shared any) (locker, error) {
	return &shedLockClient{s: shared.(*shedLock), by: "bench-" + randomID()}, nil
}

func (c *shedLockClient) tryLock(ctx context.Context, name string) (bool, error) {
	s, t := c.s, c.s.ttlArg(ttl)
	if _, ok := s.inserted.Load(name); !ok {
		n, err := rowsAffected(s.st["shedlock_insert"].ExecContext(ctx, name, t, c.by))
		if err != nil {
			return false, err
		}
		s.inserted.Store(name, true)
		if n == 1 {
			return true, nil
		}
	}
	var args []any
	if s.dialect == fence.MySQL {
		args = []any{t, c.by, name}
	} else {
		args = []any{name, t, c.by}
	}
	n, err := rowsAffected(s.st["shedlock_lock"].ExecContext(ctx, args...))
	return n == 1, err
}

func (c *shedLockClient) renew(ctx context.Context, name string) (bool, error) {
	s, t := c.s, c.s.ttlArg(ttl+time.Duration(c.renews.Add(1)%1_000_000)*time.Millisecond)
	var args []any
	if s.dialect == fence.MySQL {
		args = []any{t, name, c.by}
	} else {
		args = []any{name, t, c.by}
	}
	n, err := rowsAffected(s.st["shedlock_extend"].ExecContext(ctx, args...))
	return n == 1, err
}

func (c *shedLockClient) unlock(ctx context.Context, name string) error {
	s, least := c.s, c.s.ttlArg(0)
	var args []any
	if s.dialect == fence.MySQL {
		args = []any{least, least, name, c.by}
	} else {
		args = []any{name, least, c.by}
	}
	n, err := rowsAffected(s.st["shedlock_unlock"].ExecContext(ctx, args...))
	if err == nil && n != 1 {
		err = fmt.Errorf("peers: shedlock: unlock of %s changed %d rows", name, n)
	}
	return err
}

func (c *shedLockClient) close() {}

// river is River's leader election (riverqueue/river, river_leader.sql and
// the elector): elect and re-elect are a transaction of a DELETE of an
// expired leader and an INSERT … ON CONFLICT; resigning deletes the row and
// notifies in one statement. No fence token; durable only on a logged
// table.
type river struct {
	st    stmts
	topic string
}

func newRiverShared(unlogged bool) func(ctx context.Context, e *bench.Env) (any, error) {
	return func(ctx context.Context, e *bench.Env) (any, error) {
		kind := "logged"
		if unlogged {
			kind = "unlogged"
		}
		t := e.Table("river_leader_" + kind)
		q, err := ddl(e.Dialect, "river_create_"+kind, t)
		if err != nil {
			return nil, err
		}
		if err := e.DDL(ctx, q); err != nil {
			return nil, err
		}
		st, err := prepare(ctx, e, t, "river_delete_expired", "river_elect", "river_reelect", "river_resign")
		if err != nil {
			return nil, err
		}
		return &river{st: st, topic: t + "_leadership"}, nil
	}
}

type riverClient struct {
	r   *river
	db  *sql.DB
	id  string
	ttl string
}

func newRiver(_ context.Context, e *bench.Env, shared any) (locker, error) {
	return &riverClient{r: shared.(*river), db: e.DB, id: "bench-" + randomID(), ttl: fmt.Sprintf("%d milliseconds", ttl.Milliseconds())}, nil
}

func (c *riverClient) elect(ctx context.Context, name, stmt string) (bool, error) {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if _, err := tx.StmtContext(ctx, c.r.st["river_delete_expired"]).ExecContext(ctx, name); err != nil {
		return false, err
	}
	n, err := rowsAffected(tx.StmtContext(ctx, c.r.st[stmt]).ExecContext(ctx, name, c.id, c.ttl))
	if err != nil {
		return false, err
	}
	return n == 1, tx.Commit()
}

func (c *riverClient) tryLock(ctx context.Context, name string) (bool, error) {
	return c.elect(ctx, name, "river_elect")
}

func (c *riverClient) renew(ctx context.Context, name string) (bool, error) {
	return c.elect(ctx, name, "river_reelect")
}

func (c *riverClient) unlock(ctx context.Context, name string) error {
	_, err := c.r.st["river_resign"].ExecContext(ctx, name, c.id, c.r.topic)
	return err
}

func (c *riverClient) close() {}

// sessionLocker is PostgreSQL's advisory lock or MySQL's GET_LOCK on a
// pinned connection, as their users must hold them.
type sessionLocker struct {
	conn        *sql.Conn
	lock, unlck string
	key         func(name string) any
	prefix      string
}

func newSession(ctx context.Context, e *bench.Env, _ any) (locker, error) {
	lockName, unlockName := "advisory_lock", "advisory_unlock"
	prefix := e.Table("")
	key := func(name string) any {
		h := fnv.New64a()
		h.Write([]byte(prefix + name))
		return int64(h.Sum64())
	}
	if e.Dialect == fence.MySQL {
		lockName, unlockName = "get_lock", "release_lock"
		key = func(name string) any { return prefix + name }
	}
	lock, err := query(e.Dialect, lockName, "")
	if err != nil {
		return nil, err
	}
	unlock, err := query(e.Dialect, unlockName, "")
	if err != nil {
		return nil, err
	}
	conn, err := e.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &sessionLocker{conn: conn, lock: lock, unlck: unlock, key: key, prefix: prefix}, nil
}

func (s *sessionLocker) one(ctx context.Context, q, name string) (bool, error) {
	var ok sql.NullBool
	if err := s.conn.QueryRowContext(ctx, q, s.key(name)).Scan(&ok); err != nil {
		return false, err
	}
	return ok.Valid && ok.Bool, nil
}

func (s *sessionLocker) tryLock(ctx context.Context, name string) (bool, error) {
	return s.one(ctx, s.lock, name)
}

func (s *sessionLocker) unlock(ctx context.Context, name string) error {
	ok, err := s.one(ctx, s.unlck, name)
	if err == nil && !ok {
		err = fmt.Errorf("peers: unlock of %s: not held by this session", name)
	}
	return err
}

func (s *sessionLocker) renew(context.Context, string) (bool, error) { return false, errNoRenew }

func (s *sessionLocker) close() { s.conn.Close() }

// sessionBound is a locker whose locks last as long as its session.
type sessionBound interface{ sessionBound() }

func (s *sessionLocker) sessionBound() {}

// variant is fence's lease table driven by plain single-table UPDATEs
// (queries/postgres/variant_*.sql): a measurement of the hot-path shape
// issue 17 proposes, next to fence's own statements, not a peer and not
// fence's code. A name is first taken through fence's own Acquire (its
// upsert), once per name, as ShedLock inserts once.
//
// On MariaDB fence's renew and release already are plain single-table
// UPDATEs, so only the acquire is a variant there; renew and release are
// fence's own (Store.Renew, Store.Release).
type variant struct {
	st      stmts
	store   *fence.Store
	dialect fence.Dialect
	seen    sync.Map
}

func newVariantShared(ctx context.Context, e *bench.Env) (any, error) {
	names := []string{"variant_acquire", "variant_renew", "variant_release"}
	if e.Dialect == fence.MySQL {
		names = names[:1]
	}
	st, err := prepare(ctx, e, e.Table("leases"), names...)
	if err != nil {
		return nil, err
	}
	return &variant{st: st, store: e.Store, dialect: e.Dialect}, nil
}

type variantClient struct {
	v    *variant
	mu   sync.Mutex
	held map[string]fence.Token
}

func newVariant(_ context.Context, _ *bench.Env, shared any) (locker, error) {
	return &variantClient{v: shared.(*variant), held: map[string]fence.Token{}}, nil
}

func (c *variantClient) tryLock(ctx context.Context, name string) (bool, error) {
	var t fence.Token
	if _, seen := c.v.seen.Load(name); !seen {
		l, err := c.v.store.Acquire(ctx, name, ttl)
		c.v.seen.Store(name, true)
		if errors.Is(err, fence.ErrHeld) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		t = l.Token
	} else {
		t = fence.Token{Lease: name, Owner: randomID() + randomID()}
		if c.v.dialect == fence.MySQL {
			res, err := c.v.st["variant_acquire"].ExecContext(ctx, t.Owner, ttl.Milliseconds(), name)
			if err != nil {
				return false, err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return false, err
			}
			if t.Fence, err = res.LastInsertId(); err != nil {
				return false, err
			}
		} else {
			err := c.v.st["variant_acquire"].QueryRowContext(ctx, name, t.Owner, ttl.Milliseconds()).Scan(&t.Fence)
			if errors.Is(err, sql.ErrNoRows) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
		}
	}
	c.mu.Lock()
	c.held[name] = t
	c.mu.Unlock()
	return true, nil
}

func (c *variantClient) token(name string) fence.Token {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[name]
}

func (c *variantClient) renew(ctx context.Context, name string) (bool, error) {
	t := c.token(name)
	if c.v.dialect == fence.MySQL {
		_, err := c.v.store.Renew(ctx, t, ttl)
		if errors.Is(err, fence.ErrLost) {
			return false, nil
		}
		return err == nil, err
	}
	var until int64
	err := c.v.st["variant_renew"].QueryRowContext(ctx, name, t.Owner, t.Fence, ttl.Milliseconds()).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (c *variantClient) unlock(ctx context.Context, name string) error {
	t := c.token(name)
	if c.v.dialect == fence.MySQL {
		return c.v.store.Release(ctx, t)
	}
	n, err := rowsAffected(c.v.st["variant_release"].ExecContext(ctx, name, t.Owner, t.Fence))
	if err == nil && n != 1 {
		err = fmt.Errorf("peers: variant: release of %s changed %d rows", name, n)
	}
	return err
}

func (c *variantClient) close() {}
