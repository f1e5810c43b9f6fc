package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

type workerConfig struct {
	dsn, prefix, name string
	ttl, work         time.Duration
	wait, heedless    bool
	seed, verbose     bool
}

// worker runs one reconciliation under fence.Run, the way each replica of a
// service would, and returns the exit status for how it ended. Its last line
// says what it committed, because for a stale worker that is the claim that
// matters: nothing.
func worker(ctx context.Context, stdout, stderr io.Writer, c workerConfig) int {
	say := func(format string, args ...any) {
		fmt.Fprintf(stdout, "%s: %s\n", c.name, fmt.Sprintf(format, args...))
	}
	level := slog.LevelWarn
	if c.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("worker", c.name)

	s, err := fencedsn.Open(ctx, c.dsn, fence.WithPrefix(c.prefix), fence.WithLogger(log))
	if err != nil {
		say("error: %v", err)
		return exitFailed
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		say("error: %v", err)
		return exitFailed
	}
	r := newReconciler(s)
	r.heedless = c.heedless
	if err := r.setup(ctx); err != nil {
		say("error: %v", err)
		return exitFailed
	}
	if c.seed {
		if err := r.seed(ctx, demoItems); err != nil {
			say("error: %v", err)
			return exitFailed
		}
	}
	r.pause = func(ctx context.Context, fixes []fix) {
		if c.work <= 0 {
			say("scanned: %d to fix", len(fixes))
			return
		}
		say("scanned: %d to fix; working for %v before writing", len(fixes), c.work)
		if c.heedless {
			time.Sleep(c.work)
			return
		}
		select {
		case <-time.After(c.work):
		case <-ctx.Done():
		}
	}

	var sum summary
	opts := []fence.RunOption{
		fence.WithTTL(c.ttl),
		fence.WithRunLogger(log),
		fence.OnStarted(func(ctx context.Context, t fence.Token) {
			id, _ := fence.RunIDFrom(ctx)
			say("acquired %s fence %d, run %d", t.Lease, t.Fence, id)
		}),
	}
	if c.wait {
		opts = append(opts, fence.WithWait())
	}
	res, err := fence.Run(ctx, s, leaseName, r.job(&sum), opts...)
	if err != nil {
		say("error: %v", err)
		return exitFailed
	}

	switch res.Outcome {
	case fence.Completed:
		say("completed: fence %d, run %d: scanned %d items, fixed %d, report written", res.Token.Fence, res.RunID, sum.Scanned, sum.Fixed)
		return exitCompleted
	case fence.NotAcquired:
		say("not acquired: %v", res.Err)
		return exitNotAcquired
	case fence.Unknown:
		say("%s: the job finished but its completion's answer was lost: %v", res.Outcome, res.Err)
		return exitFailed
	case fence.Failed:
		say("failed: fence %d, run %d: %v", res.Token.Fence, res.RunID, firstErr(res.JobErr, res.Err))
		return exitFailed
	}
	// Lost or Rejected: the runner's cause and the job's own error can each
	// be the first news of the loss, depending on which noticed first.
	why := describeLoss(ctx, s, res.Token, firstErr(res.Err, res.JobErr))
	if sum.committed() {
		say("%s: %s; committed %d fixes and report=%t before the loss, completion refused", res.Outcome, why, sum.Fixed, sum.Reported)
	} else {
		say("%s: %s; nothing committed", res.Outcome, why)
	}
	if res.Err != nil {
		say("cause: %v", res.Err)
	}
	if res.JobErr != nil && (res.Err == nil || res.JobErr.Error() != res.Err.Error()) {
		say("job: %v", res.JobErr)
	}
	if res.Outcome == fence.Rejected {
		return exitRejected
	}
	return exitLost
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
