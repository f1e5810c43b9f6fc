package fencegocron

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/internal/keep"
)

// Defaults.
const (
	// DefaultMinHold is how long Locker keeps a job's lease after the run
	// started even when the job finished sooner. gocron does not tell the
	// Locker a job's period, so this cannot be derived as fence.Schedule
	// does (half the period). One second is below every period a seconds
	// cron can express except the 1 s one, and far above the spread
	// between replicas' timers for one cron slot (clock skew plus
	// scheduling latency, normally milliseconds).
	DefaultMinHold = time.Second
	// DefaultKeyPrefix is put before the gocron job name to make the lease
	// name, so gocron's leases do not collide with the application's own.
	DefaultKeyPrefix = "gocron:"
)

// Sentinel errors of this package.
var (
	// ErrNotLeader is returned by Elector.IsLeader (and by a task from
	// Elector.Job) when this instance is not, or can no longer prove it
	// is, the leader. gocron then skips the run.
	ErrNotLeader = errors.New("fencegocron: not the leader")

	// ErrNotLocked is returned by a task from Locker.Job when gocron ran it
	// without a lock from that Locker: the scheduler or job was not given
	// the Locker (gocron.WithDistributedLocker or
	// gocron.WithDistributedJobLocker), or the task was given its own
	// context as first parameter, so it is not gocron's job context.
	ErrNotLocked = errors.New("fencegocron: task ran without a lock from this Locker")
)

// Option configures a Locker or an Elector.
type Option func(*config)

type config struct {
	ttl, renewEvery, deadline, minHold time.Duration
	keyPrefix                          string
	log                                *slog.Logger
}

// WithTTL sets the lease TTL (default fence.DefaultTTL, 30 s). A holder
// that dies keeps its job, or the leadership, for up to this long.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithRenewEvery sets how often a held lease is renewed (default TTL/3).
func WithRenewEvery(d time.Duration) Option { return func(c *config) { c.renewEvery = d } }

// WithRenewDeadline sets how long after the start of the last successful
// renewal (or of the acquire), on the local monotonic clock, the holder
// goes on believing it holds the lease without another one (default 2/3
// TTL). It must be below the TTL: the gap is the margin for a slow
// database and for the job to notice its cancellation before the lease
// can lapse and be taken.
func WithRenewDeadline(d time.Duration) Option { return func(c *config) { c.deadline = d } }

// WithMinHold sets how long, counted from just before the acquire, Locker
// keeps a job's lease even when the job finished sooner (default
// DefaultMinHold; 0 releases at once). Locker only.
//
// It must be longer than the largest gap between the replicas' timers for
// one slot, or a late replica runs the slot again after the winner
// released it; and shorter than the job's period, or the winner's hold
// blocks the next slot on every replica and that slot is skipped. Half the
// shortest period of the jobs that share the Locker is a good choice; give
// a job with another period its own Locker (gocron.WithDistributedJobLocker).
func WithMinHold(d time.Duration) Option { return func(c *config) { c.minHold = d } }

// WithKeyPrefix sets what is put before the gocron job name to make the
// lease name (default DefaultKeyPrefix). Locker only.
func WithKeyPrefix(p string) Option { return func(c *config) { c.keyPrefix = p } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

func newConfig(opts []Option) (config, error) {
	c := config{
		ttl:       fence.DefaultTTL,
		minHold:   DefaultMinHold,
		keyPrefix: DefaultKeyPrefix,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if err := fence.ValidateTTL(c.ttl); err != nil {
		return c, err
	}
	if c.renewEvery == 0 {
		c.renewEvery = c.ttl / 3
	}
	if c.deadline == 0 {
		c.deadline = c.ttl * 2 / 3
	}
	switch {
	case c.renewEvery <= 0 || c.renewEvery >= c.deadline:
		return c, fmt.Errorf("%w: fencegocron: renew interval %v must be positive and below the renew deadline %v", fence.ErrInvalid, c.renewEvery, c.deadline)
	case c.deadline >= c.ttl:
		return c, fmt.Errorf("%w: fencegocron: renew deadline %v must be below the TTL %v", fence.ErrInvalid, c.deadline, c.ttl)
	case c.minHold < 0 || c.minHold > fence.MaxTTL:
		return c, fmt.Errorf("%w: fencegocron: min hold %v is outside 0..%v", fence.ErrInvalid, c.minHold, fence.MaxTTL)
	}
	if c.keyPrefix != "" {
		if err := fence.ValidateName(c.keyPrefix); err != nil {
			return c, fmt.Errorf("fencegocron: key prefix: %w", err)
		}
	}
	return c, nil
}

// keeper is the renewal schedule of one acquisition under c: fence's own
// renewal loop (the one fence.Run uses), which ends the acquisition's
// authority when a renewal is refused or none succeeded within the renew
// deadline.
func (c config) keeper(s *fence.Store, tok fence.Token) keep.Config {
	return keep.Config{
		TTL:         c.ttl,
		RenewEvery:  c.renewEvery,
		Deadline:    c.deadline,
		CallTimeout: c.renewEvery,
		Renew: func(ctx context.Context) error {
			_, err := s.Renew(ctx, tok, c.ttl)
			return err
		},
		Refused: func(err error) bool { return errors.Is(err, fence.ErrLost) },
		Unproven: func(last error) error {
			return &fence.UnprovenError{Token: tok, Deadline: c.deadline, Last: last}
		},
		OnLost: func(cause error) {
			c.log.Warn("fencegocron: lease lost", "lease", tok.Lease, "fence", tok.Fence, "cause", cause)
		},
		OnRetry: func(err error) {
			c.log.Warn("fencegocron: renewal failed, retrying", "lease", tok.Lease, "fence", tok.Fence, "err", err)
		},
	}
}

// electOptions are c as options of fence.Elect. A follower tries every
// renew interval, as before fence.Elect existed.
func (c config) electOptions() []fence.RunOption {
	return []fence.RunOption{
		fence.WithTTL(c.ttl),
		fence.WithRenewEvery(c.renewEvery),
		fence.WithRenewDeadline(c.deadline),
		fence.WithRetryPeriod(c.renewEvery),
		fence.WithRunLogger(c.log),
	}
}
