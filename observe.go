package fence

import (
	"context"
	"time"
)

// Op names an operation an Observer sees.
type Op string

// Operations reported to observers.
const (
	OpAcquire     Op = "acquire"
	OpRenew       Op = "renew"
	OpRenewBatch  Op = "renew_batch"
	OpRelease     Op = "release"
	OpRevoke      Op = "revoke"
	OpWrite       Op = "fenced_write" // Exec, ExecIn
	OpTx          Op = "fenced_tx"    // InTx, CheckTx
	OpStartRun    Op = "start_run"
	OpFinishRun   Op = "finish_run"
	OpMarkRunLost Op = "mark_run_lost"

	// OpRenewBatchToken is one token of a renew_batch: RenewBatch reports
	// the batch (lease "", Count and Lost) and, inside it, one
	// renew_batch_token per token with the token's lease, fence and result
	// (Err nil, wrapping ErrLost, or the error of the whole batch). These
	// observations start before the batch's statements and end before the
	// batch's own, with the batch's context; the context their Observe
	// returns is not used, since the tokens share the batch's statements.
	OpRenewBatchToken Op = "renew_batch_token"
)

// Event is the result of an observed operation.
type Event struct {
	// Fence is the token's fence (for acquire: the new fence, 0 if refused).
	Fence int64
	// Err is nil on success; errors.Is(Err, ErrHeld / ErrLost …) tells why not.
	Err error
	// ExpiresIn is the time left on the lease right after a successful
	// acquire, renew or renew_batch_token: the TTL, counted by the database
	// from that statement.
	ExpiresIn time.Duration
	// Status is the run's status after start_run and finish_run, and
	// RunLost after a mark_run_lost that marked the run (empty if the run
	// was no longer running, or did not carry the fence).
	Status RunStatus
	// Run is the run's id for start_run (0 if none was started), finish_run
	// and mark_run_lost.
	Run int64
	// Count is the number of tokens of a renew_batch and Lost how many of
	// them were refused.
	Count, Lost int
	// Cause, on a mark_run_lost by a Runner, is why the runner stopped the
	// run's job: an error wrapping ErrLost, and ErrUnproven when no renewal
	// succeeded within the renew deadline (a loss no refused operation
	// reports). It is set whether or not the mark got through (Err), and
	// nil for a MarkRunLost called by anyone else.
	Cause error
}

// Observer sees every lease operation of a Store, for metrics and tracing
// (packages fenceprom and fenceotel). Observe is called before the operation
// and the function it returns after, with the result; the context it
// returns is the one the operation runs with (for a span). Both must be
// cheap and safe for concurrent use. An observer that does not know an Op
// may ignore it: ops may be added (renew_batch_token, for instance, reports
// per token what renew_batch reports for the batch as a whole).
type Observer interface {
	Observe(ctx context.Context, op Op, lease string) (context.Context, func(Event))
}

// WithObserver adds an observer to the store. Several may be added.
func WithObserver(o Observer) Option {
	return func(s *Store) { s.observers = append(s.observers, o) }
}

func (s *Store) observe(ctx context.Context, op Op, lease string) (context.Context, func(Event)) {
	switch len(s.observers) {
	case 0:
		return ctx, func(Event) {}
	case 1:
		return s.observers[0].Observe(ctx, op, lease)
	}
	ends := make([]func(Event), len(s.observers))
	for i, o := range s.observers {
		ctx, ends[i] = o.Observe(ctx, op, lease)
	}
	return ctx, func(e Event) {
		for i := len(ends) - 1; i >= 0; i-- {
			ends[i](e)
		}
	}
}

// observeEach starts one observation of op per token, inside the operation
// whose context is ctx; nil without observers. The contexts the observers
// return are dropped: the tokens share the operation's statements.
func (s *Store) observeEach(ctx context.Context, op Op, ts []Token) []func(Event) {
	if len(s.observers) == 0 || len(ts) == 0 {
		return nil
	}
	ends := make([]func(Event), len(ts))
	for i, t := range ts {
		_, ends[i] = s.observe(ctx, op, t.Lease)
	}
	return ends
}
