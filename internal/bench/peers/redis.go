package peers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fence/internal/bench"
)

// The Redis lock: SET key token NX PX ttl to lock, and the standard
// compare-and-delete and compare-and-pexpire scripts to unlock and renew.
// Not durable (lost on restart or failover without fsync'd AOF), no fence
// token, a second system.
var (
	redisRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	redisRenew   = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)
)

type redisShared struct {
	c      *redis.Client
	prefix string
}

// newRedisShared connects to addr; an unreachable Redis makes the peer's
// rows skipped, not the run failed. Its commands are counted as round trips
// (queries) of e by a hook.
func newRedisShared(addr string) func(ctx context.Context, e *bench.Env) (any, error) {
	return func(ctx context.Context, e *bench.Env) (any, error) {
		if addr == "" {
			return nil, fmt.Errorf("%w: no Redis address (--redis \"\")", bench.ErrSkip)
		}
		c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 2 * time.Second, PoolSize: 32})
		if err := c.Ping(ctx).Err(); err != nil {
			c.Close()
			return nil, fmt.Errorf("%w: redis at %s: %v", bench.ErrSkip, addr, err)
		}
		c.AddHook(countHook{e.Count})
		return &redisShared{c: c, prefix: "fence-bench:" + e.Table("")}, nil
	}
}

func (r *redisShared) Close() error { return r.c.Close() }

type redisLocker struct {
	r    *redisShared
	mu   sync.Mutex
	toks map[string]string
	keys []string
}

func newRedis(_ context.Context, _ *bench.Env, shared any) (locker, error) {
	return &redisLocker{r: shared.(*redisShared), toks: map[string]string{}}, nil
}

func (l *redisLocker) tryLock(ctx context.Context, name string) (bool, error) {
	tok := randomID()
	ok, err := l.r.c.SetNX(ctx, l.r.prefix+name, tok, ttl).Result()
	if err != nil || !ok {
		return false, err
	}
	l.mu.Lock()
	if _, seen := l.toks[name]; !seen {
		l.keys = append(l.keys, name)
	}
	l.toks[name] = tok
	l.mu.Unlock()
	return true, nil
}

func (l *redisLocker) tok(name string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.toks[name]
}

func (l *redisLocker) unlock(ctx context.Context, name string) error {
	n, err := redisRelease.Run(ctx, l.r.c, []string{l.r.prefix + name}, l.tok(name)).Int()
	if err == nil && n != 1 {
		err = fmt.Errorf("peers: redis: compare-and-delete of %s deleted nothing", name)
	}
	return err
}

func (l *redisLocker) renew(ctx context.Context, name string) (bool, error) {
	n, err := redisRenew.Run(ctx, l.r.c, []string{l.r.prefix + name}, l.tok(name), ttl.Milliseconds()).Int()
	return n == 1, err
}

// close deletes what this client may have left behind.
func (l *redisLocker) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range l.keys {
		redisRelease.Run(context.Background(), l.r.c, []string{l.r.prefix + k}, l.toks[k])
	}
}

type countHook struct{ n *bench.Counter }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.AddQuery(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.AddQuery(1)
		return next(ctx, cmds)
	}
}
