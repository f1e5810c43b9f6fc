package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencekit/fence"
)

// CycleFence is the name of fence's own acquire-and-release cycle, which the
// alternatives are shown next to.
const CycleFence = "cycle_fence"

// Alternatives returns what users pick instead of fence, each measured as a
// lock-and-unlock cycle on the same machine: PostgreSQL advisory locks,
// MariaDB/MySQL GET_LOCK. They have no target; the table says what each
// gives up. The Redis lock is in fence-bench-peers (internal/bench/peers),
// which fence does not link.
func Alternatives() []Case {
	return []Case{
		{Name: CycleFence, Setup: setupCycleFence,
			GivesUp: "nothing: fenced, durable (the fence survives restarts), not bound to a session"},
		{Name: "cycle_pg_advisory", Baseline: CycleFence, Dialects: []fence.Dialect{fence.Postgres}, Setup: setupPGAdvisory,
			GivesUp: "no fence token; not durable (no row, no record, gone on restart); bound to one session: the holder must pin a connection, and a dropped connection frees the lock while the old holder runs on"},
		{Name: "cycle_mysql_get_lock", Baseline: CycleFence, Dialects: []fence.Dialect{fence.MySQL}, Setup: setupGetLock,
			GivesUp: "no fence token; not durable; bound to one session (connection), freed silently when it drops"},
	}
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

// ErrSkip is wrapped by the error of a case that cannot run here (an
// unreachable Redis, a peer whose module could not be had): it is reported as skipped, not as a failure.
var ErrSkip = errors.New("skipped")
