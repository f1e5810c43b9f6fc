package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fence"
)

// CycleFence is the name of fence's own acquire-and-release cycle, which the
// alternatives are shown next to.
const CycleFence = "cycle_fence"

// Alternatives returns what users pick instead of fence, each measured as a
// lock-and-unlock cycle on the same machine: PostgreSQL advisory locks,
// MariaDB/MySQL GET_LOCK and a Redis lock. They have no target; the table
// says what each gives up.
func Alternatives(redisAddr string) []Case {
	cs := []Case{
		{Name: CycleFence, Setup: setupCycleFence,
			GivesUp: "nothing: fenced, durable (the fence survives restarts), not bound to a session"},
		{Name: "cycle_pg_advisory", Baseline: CycleFence, Dialects: []fence.Dialect{fence.Postgres}, Setup: setupPGAdvisory,
			GivesUp: "no fence token; not durable (no row, no record, gone on restart); bound to one session: the holder must pin a connection, and a dropped connection frees the lock while the old holder runs on"},
		{Name: "cycle_mysql_get_lock", Baseline: CycleFence, Dialects: []fence.Dialect{fence.MySQL}, Setup: setupGetLock,
			GivesUp: "no fence token; not durable; bound to one session (connection), freed silently when it drops"},
	}
	if redisAddr != "" {
		cs = append(cs, Case{Name: "cycle_redis", Baseline: CycleFence, Setup: setupRedis(redisAddr),
			GivesUp: "no fence token (a paused holder still writes after expiry); not durable (lost on restart or failover without fsync'd AOF); a second system, not the database the writes go to"})
	}
	return cs
}

func setupCycleFence(ctx context.Context, e *Env) (Op, error) {
	return Op{Do: func(ctx context.Context) error {
		l, err := e.Store.Acquire(ctx, "b-cycle", hour)
		if err != nil {
			return err
		}
		return e.Store.Release(ctx, l.Token)
	}}, nil
}

// sessionLock runs lock and unlock on one pinned connection, as a user of
// session locks must.
func sessionLock(ctx context.Context, e *Env, lock, unlock string, arg any) (Op, error) {
	conn, err := e.DB.Conn(ctx)
	if err != nil {
		return Op{}, err
	}
	one := func(ctx context.Context, q string) error {
		var ok sql.NullBool
		if err := conn.QueryRowContext(ctx, q, arg).Scan(&ok); err != nil {
			return err
		}
		if !ok.Valid || !ok.Bool {
			return fmt.Errorf("bench: %s returned %v", q, ok)
		}
		return nil
	}
	return Op{
		Do: func(ctx context.Context) error {
			if err := one(ctx, lock); err != nil {
				return err
			}
			return one(ctx, unlock)
		},
		Close: func() { conn.Close() },
	}, nil
}

func setupPGAdvisory(ctx context.Context, e *Env) (Op, error) {
	return sessionLock(ctx, e, "SELECT pg_try_advisory_lock($1)", "SELECT pg_advisory_unlock($1)", int64(0x66656e6365))
}

func setupGetLock(ctx context.Context, e *Env) (Op, error) {
	return sessionLock(ctx, e, "SELECT GET_LOCK(?, 0)", "SELECT RELEASE_LOCK(?)", e.Table("lock"))
}

// redisRelease deletes the key only if it still holds our token, the
// standard compare-and-delete.
var redisRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// setupRedis: SET key token NX PX ttl, then the compare-and-delete script,
// through go-redis against a local Redis. Its round trips are counted by a
// hook, into the Env's counter as queries.
func setupRedis(addr string) func(ctx context.Context, e *Env) (Op, error) {
	return func(ctx context.Context, e *Env) (Op, error) {
		c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 2 * time.Second})
		if err := c.Ping(ctx).Err(); err != nil {
			c.Close()
			return Op{}, fmt.Errorf("%w: redis at %s: %v", ErrSkip, addr, err)
		}
		c.AddHook(countHook{&e.Count.query})
		key := "fence-bench:" + e.Table("lock")
		return Op{
			Do: func(ctx context.Context) error {
				var b [16]byte
				rand.Read(b[:])
				tok := hex.EncodeToString(b[:])
				ok, err := c.SetNX(ctx, key, tok, time.Hour).Result()
				if err != nil {
					return err
				}
				if !ok {
					return errors.New("bench: redis lock is held")
				}
				n, err := redisRelease.Run(ctx, c, []string{key}, tok).Int()
				if err == nil && n != 1 {
					err = errors.New("bench: redis compare-and-delete deleted nothing")
				}
				return err
			},
			Close: func() {
				c.Del(context.Background(), key)
				c.Close()
			},
		}, nil
	}
}

// ErrSkip is wrapped by the error of a case that cannot run here (an
// unreachable Redis): it is reported as skipped, not as a failure.
var ErrSkip = errors.New("skipped")

type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}
