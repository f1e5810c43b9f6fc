package fencemcp_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencemcp"
	"github.com/fencekit/fence/fencemcp/internal/harness"
	"github.com/fencekit/fence/internal/teststore"
	"github.com/fencekit/fence/task"
)

func newKey(t testing.TB) []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// fencedTool applies its effect in a transaction that checks the claim
// under the lease row's lock, and records which epoch committed it.
func fencedTool(t testing.TB, lc *fencemcp.LeaseChecker, fs *fence.Store) harness.Tool {
	if _, err := fs.DB().Exec(`CREATE TABLE IF NOT EXISTS ` + fs.Prefix() + `mw_effects (step VARCHAR(191), epoch BIGINT)`); err != nil {
		t.Fatal(err)
	}
	ins := fs.Rebind(`INSERT INTO ` + fs.Prefix() + `mw_effects (step, epoch) VALUES (?, ?)`)
	return func(ctx context.Context, a harness.Args) (string, error) {
		c, ok := fencemcp.ClaimFrom(ctx)
		if !ok {
			return "", fmt.Errorf("no claim in the tool's context")
		}
		err := lc.InTx(ctx, c, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, ins, c.Step, c.Fence)
			return err
		})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("applied %s at epoch %d", c.Step, c.Fence), nil
	}
}

func TestMiddlewareMatrix(t *testing.T) {
	for _, combo := range harness.Combos {
		t.Run(combo[0]+"/"+combo[1], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			fs := teststore.SQLite.Open(t)
			ts, err := task.New(fs)
			if err != nil {
				t.Fatal(err)
			}
			key := newKey(t)
			lc, err := fencemcp.NewLeaseChecker(fs)
			if err != nil {
				t.Fatal(err)
			}
			v, _ := fencemcp.NewVerifier(key, nil)
			g, _ := fencemcp.NewGuard(v, lc)
			st, _ := fencemcp.NewStamper(key, false)
			tool := fencedTool(t, lc, fs)
			conn := harness.Start(t, harness.Options{SDK: combo[0], Wire: combo[1], Stamper: st, Guard: g, Tool: tool})

			if err := ts.Create(ctx, "t1", task.Plan{Model: "m"}); err != nil {
				t.Fatal(err)
			}
			e1, err := ts.Start(ctx, "t1")
			if err != nil {
				t.Fatal(err)
			}
			out, err := conn.Call(fencemcp.WithStep(ctx, e1, "s1"), harness.Args{Payload: "x"})
			if err != nil || out.IsError || out.Text != "applied s1 at epoch "+fmt.Sprint(e1.Number()) {
				t.Fatalf("current epoch's call: %+v, %v", out, err)
			}
			e2, err := ts.Replan(ctx, "t1", task.Plan{Model: "m2"})
			if err != nil {
				t.Fatal(err)
			}
			out, err = conn.Call(fencemcp.WithStep(ctx, e1, "s2"), harness.Args{Payload: "x"})
			if err != nil || !out.IsError || !out.Refused || out.Refusal.Reason != "superseded" || out.Refusal.Retry ||
				!strings.HasPrefix(out.Text, "superseded, do not retry") {
				t.Fatalf("stale epoch's call: want a superseded refusal, got %+v, %v", out, err)
			}
			out, err = conn.Call(fencemcp.WithStep(ctx, e2, "s2"), harness.Args{Payload: "x"})
			if err != nil || out.IsError {
				t.Fatalf("new epoch's call: %+v, %v", out, err)
			}
			// Signed with another key: forged.
			other, _ := fencemcp.NewStamper(newKey(t), false)
			conn2 := harness.Start(t, harness.Options{SDK: combo[0], Wire: combo[1], Stamper: other, Guard: g, Tool: tool})
			out, err = conn2.Call(fencemcp.WithStep(ctx, e2, "s3"), harness.Args{Payload: "x"})
			if err != nil || !out.Refused || out.Refusal.Reason != "forged" {
				t.Fatalf("forged call: %+v, %v", out, err)
			}
			// No entry at all.
			out, err = conn.Call(ctx, harness.Args{Payload: "x"})
			if err != nil || !out.Refused || out.Refusal.Reason != "missing" {
				t.Fatalf("unstamped call: %+v, %v", out, err)
			}
			if hs := conn.FenceHeaders(); combo[1] == harness.HTTP && len(hs) < 3 {
				t.Fatalf("over HTTP, %d requests had a %s header, want one per stamped call (3)", len(hs), fencemcp.HeaderFence)
			}
			var n int
			if err := fs.DB().QueryRow(`SELECT COUNT(*) FROM ` + fs.Prefix() + `mw_effects`).Scan(&n); err != nil || n != 2 {
				t.Fatalf("effects: %d, %v; want 2 (s1 at epoch 1, s2 at epoch 2)", n, err)
			}
		})
	}
}
