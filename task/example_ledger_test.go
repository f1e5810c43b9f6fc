package task_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"

	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/task"
)

// The sample of the package doc's "The effect ledger", word for word
// (TestDocSamplesAreCompiled); ExampleLedger runs it on SQLite.

// chargeOnce charges order 17 at most once, whichever epoch of the task asks.
func chargeOnce(ctx context.Context, ts *task.Store, e task.Epoch, payload []byte) (task.Effect, error) {
	l, err := task.NewLedger(ts, task.WithReconcile(askThePaymentProvider))
	if err != nil {
		return task.Effect{}, err
	}
	return l.Do(ctx, e, "charge-order-17", payload, func(ctx context.Context) ([]byte, error) {
		return charge(ctx, e.IdempotencyKey("charge-order-17"), payload)
	})
}

// provider stands for a payment API that deduplicates by idempotency key.
var provider = struct {
	sync.Mutex
	charges map[string]string
}{charges: map[string]string{}}

func charge(_ context.Context, key string, payload []byte) ([]byte, error) {
	provider.Lock()
	defer provider.Unlock()
	if r, ok := provider.charges[key]; ok {
		return []byte(r), nil
	}
	r := fmt.Sprintf("receipt %d for %s", len(provider.charges)+1, payload)
	provider.charges[key] = r
	return []byte(r), nil
}

// askThePaymentProvider decides a charge in doubt by its idempotency key.
func askThePaymentProvider(_ context.Context, d task.Doubt) (task.Resolution, error) {
	provider.Lock()
	defer provider.Unlock()
	r, ok := provider.charges[d.Current.IdempotencyKey(d.Step)]
	return task.Resolution{Applied: ok, Result: []byte(r)}, nil
}

func ExampleLedger() {
	dir, err := os.MkdirTemp("", "fence-ledger")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	fs, err := fencedsn.Open(ctx, "sqlite:"+filepath.Join(dir, "fence.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer fs.Close()
	if _, err := fs.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ts, err := task.New(fs)
	if err != nil {
		log.Fatal(err)
	}
	if err := ts.Create(ctx, "refund-17", task.Plan{Model: "a"}); err != nil {
		log.Fatal(err)
	}
	e1, err := ts.Start(ctx, "refund-17")
	if err != nil {
		log.Fatal(err)
	}
	first, err := chargeOnce(ctx, ts, e1, []byte("5 EUR"))
	if err != nil {
		log.Fatal(err)
	}
	// A model switch: the new plan retries the step.
	e2, err := ts.Replan(ctx, "refund-17", task.Plan{Model: "b"})
	if err != nil {
		log.Fatal(err)
	}
	again, err := chargeOnce(ctx, ts, e2, []byte("5 EUR"))
	if err != nil {
		log.Fatal(err)
	}
	_, err = chargeOnce(ctx, ts, e1, []byte("5 EUR"))
	fmt.Printf("epoch 1: %s\nepoch 2: %s (replayed %v)\nepoch 1 again: %v\n", first.Result, again.Result, again.Replayed, err != nil)
	// Output:
	// epoch 1: receipt 1 for 5 EUR
	// epoch 2: receipt 1 for 5 EUR (replayed true)
	// epoch 1 again: true
}
