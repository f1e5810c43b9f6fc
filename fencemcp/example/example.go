// Package example is fencemcp end to end: a scripted planner (no model)
// runs a three-step task through an MCP server over streamable HTTP whose
// tool writes to the database and calls a downstream HTTP service. Worker
// A freezes in the middle of a tool call; its lease lapses; worker B
// resumes the task and finishes it; A thaws and is refused at every hop:
// the downstream service, the tool's database write, the MCP server, and
// its own effect ledger. Each effect lands once.
//
// The freeze is simulated in-process: A's call is held inside the tool
// (where a SIGSTOPped agent's request would sit) and A sends no renewals,
// so its lease lapses by the database clock. The zombie suite
// (fencemcp/zombie, TestZombieSIGSTOP) stops a real agent process.
//
// Run it with fence demo agent (which runs the fence-demo-agent command of
// this module), or from a checkout:
//
//	cd fencemcp && go run ./cmd/fence-demo-agent            # SQLite in a temp dir
//	cd fencemcp && go run ./cmd/fence-demo-agent --dsn 'postgres://…'
package example

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
	"github.com/fencekit/fence/fencehttp"
	"github.com/fencekit/fence/fencemcp"
	"github.com/fencekit/fence/fencemcp/gosdk"
	"github.com/fencekit/fence/task"
)

// Report is what Run saw, for its test.
type Report struct {
	Task        string
	StaleEpoch  int64          // the frozen worker A's epoch
	NewEpoch    int64          // worker B's epoch, which finished the task
	Refusals    []string       // the hops that refused the thawed agent, in order
	Orders      map[string]int // step -> rows the tool wrote
	Shipped     map[string]int // step -> rows the downstream service wrote
	Steps       []string       // the plan
	refusalText map[string]string
}

// Hops are the places a thawed agent must be refused, in the order the
// story meets them: the downstream service and the tool's write while its
// frozen call resumes, the call's own result, its effect ledger before its
// next call, and the MCP server when it calls without the ledger.
var Hops = []string{"downstream HTTP", "tool's DB write", "its charge call", "its own ledger", "MCP server"}

// Check returns nil when the story ended as it must: the thawed agent was
// refused at every hop (Hops, in order) and each step's effect landed once
// in the tool's table and once downstream. Anything else is an error that
// says what went wrong.
func (r *Report) Check() error {
	var errs []error
	got := map[string]bool{}
	for _, h := range r.Refusals {
		got[h] = true
	}
	for _, h := range Hops {
		if !got[h] {
			errs = append(errs, fmt.Errorf("the thawed agent (epoch %d) was NOT refused at %s", r.StaleEpoch, h))
		}
	}
	if len(errs) == 0 && strings.Join(r.Refusals, "|") != strings.Join(Hops, "|") {
		errs = append(errs, fmt.Errorf("refusals in the order %q, want %q", r.Refusals, Hops))
	}
	for _, step := range r.Steps {
		if r.Orders[step] != 1 || r.Shipped[step] != 1 {
			errs = append(errs, fmt.Errorf("step %s: %d order rows and %d shipments, want one each", step, r.Orders[step], r.Shipped[step]))
		}
	}
	return errors.Join(errs...)
}

// Summarize prints the verdict: which hop refused the thawed agent and
// how many times each effect landed.
func (r *Report) Summarize(out io.Writer) {
	fmt.Fprintf(out, "\nverdict: worker A thawed at stale epoch %d (worker B holds epoch %d):\n", r.StaleEpoch, r.NewEpoch)
	got := map[string]bool{}
	for _, h := range r.Refusals {
		got[h] = true
	}
	for _, h := range Hops {
		mark := "REFUSED"
		if !got[h] {
			mark = "NOT REFUSED"
		}
		fmt.Fprintf(out, "  %-16s %-11s %s\n", h, mark, r.refusalText[h])
	}
	for _, step := range r.Steps {
		fmt.Fprintf(out, "  step %-11s applied %d time(s) by the tool, %d time(s) downstream\n", step, r.Orders[step], r.Shipped[step])
	}
	if err := r.Check(); err != nil {
		fmt.Fprintf(out, "FAILED: %v\n", err)
		return
	}
	fmt.Fprintf(out, "OK: the zombie agent was refused at every hop; every effect landed exactly once.\n")
}

// Run plays the story on the database at dsn and prints its timeline.
func Run(ctx context.Context, out io.Writer, dsn string) (*Report, error) {
	suffix := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	fs, err := fencedsn.Open(ctx, dsn, fence.WithPrefix("fmx"+suffix+"_"))
	if err != nil {
		return nil, err
	}
	defer fs.Close()
	if _, err := fs.Migrate(ctx); err != nil {
		return nil, err
	}
	const ttl = time.Second
	ts, err := task.New(fs, task.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	start := time.Now()
	say := func(format string, a ...any) {
		fmt.Fprintf(out, "%6.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}
	p := fs.Prefix()
	db := fs.DB()
	for _, ddl := range []string{
		`CREATE TABLE ` + p + `orders (task_id VARCHAR(100), step VARCHAR(100), epoch BIGINT)`,
		`CREATE TABLE ` + p + `shipments (task_id VARCHAR(100), step VARCHAR(100), epoch BIGINT)`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return nil, err
		}
	}

	// The downstream service: fencehttp's Guard raises the task's fence in
	// the transaction of its write.
	downKey, mcpKey := key(), key()
	dv, _ := fencehttp.NewVerifier(downKey, func(r *http.Request) string { return "task:" + r.PathValue("task") })
	guard, err := fencehttp.NewGuard(dv, db, fs.Dialect(), p+"down_fences")
	if err != nil {
		return nil, err
	}
	if err := guard.CreateTable(ctx); err != nil {
		return nil, err
	}
	ship := fs.Rebind(`INSERT INTO ` + p + `shipments (task_id, step, epoch) VALUES (?, ?, ?)`)
	mux := http.NewServeMux()
	mux.Handle("POST /effects/{task}/{step}", guard.Handler(func(w http.ResponseWriter, r *http.Request, tx *sql.Tx) error {
		c, _ := fencehttp.ClaimFrom(r.Context())
		_, err := tx.ExecContext(r.Context(), ship, r.PathValue("task"), r.PathValue("step"), c.Fence)
		return err
	}))
	down := httptest.NewServer(mux)
	defer down.Close()
	downClient := &http.Client{Transport: &fencemcp.Forward{Key: downKey}}

	// The MCP server: its tool calls the downstream service with the
	// call's claim, then writes its own row in a transaction that checks
	// the claim under the lease row's lock. freeze stops one execution.
	lc, err := fencemcp.NewLeaseChecker(fs)
	if err != nil {
		return nil, err
	}
	v, _ := fencemcp.NewVerifier(mcpKey, nil)
	g, _ := fencemcp.NewGuard(v, lc)
	order := fs.Rebind(`INSERT INTO ` + p + `orders (task_id, step, epoch) VALUES (?, ?, ?)`)
	frozen, thaw := make(chan struct{}), make(chan struct{})
	thawOnce := sync.OnceFunc(func() { close(thaw) })
	defer thawOnce() // on an early return, let the frozen call end so the servers can close
	var freezeEpoch int64
	var refusals []string
	why := map[string]string{}
	refuse := func(hop string, err error) {
		refusals = append(refusals, hop)
		why[hop] = firstLine(err)
		if len(why[hop]) > 60 {
			why[hop] = why[hop][:60] + "…"
		}
		say("  A refused at %-17s %s", hop+":", firstLine(err))
	}
	type stepArgs struct {
		Item string `json:"item"`
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "orders", Version: "1"}, nil)
	srv.AddReceivingMiddleware(gosdk.ServerMiddleware(g))
	mcp.AddTool(srv, &mcp.Tool{Name: "order_step", Description: "perform one step of an order"},
		func(ctx context.Context, _ *mcp.CallToolRequest, a stepArgs) (*mcp.CallToolResult, any, error) {
			c, _ := fencemcp.ClaimFrom(ctx)
			taskID, _ := c.Task()
			if c.Fence == freezeEpoch && c.Step == "charge" {
				close(frozen)
				<-thaw // the agent's process is stopped here
			}
			req, _ := http.NewRequestWithContext(ctx, "POST", down.URL+"/effects/"+taskID+"/"+c.Step, nil)
			resp, err := downClient.Do(req)
			if err != nil {
				return nil, nil, err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				if c.Fence == freezeEpoch {
					refuse("downstream HTTP", fmt.Errorf("%s %s", resp.Status, strings.TrimSpace(string(body))))
				} else {
					return nil, nil, fmt.Errorf("downstream: %s", resp.Status)
				}
			}
			err = lc.InTx(ctx, c, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, order, taskID, c.Step, c.Fence)
				return err
			})
			if err != nil {
				if c.Fence == freezeEpoch {
					refuse("tool's DB write", err)
				}
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Item + " " + c.Step + " done"}}}, nil, nil
		})
	mcpHTTP := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer mcpHTTP.Close()

	// Two workers, each an MCP client that stamps its calls.
	st, _ := fencemcp.NewStamper(mcpKey, true)
	dial := func() (*mcp.ClientSession, error) {
		cl := mcp.NewClient(&mcp.Implementation{Name: "worker", Version: "1"}, nil)
		cl.AddSendingMiddleware(gosdk.ClientMiddleware(st))
		return cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: mcpHTTP.URL, DisableStandaloneSSE: true,
			HTTPClient: &http.Client{Transport: &fencemcp.Transport{}}}, nil)
	}
	sa, err := dial()
	if err != nil {
		return nil, err
	}
	defer sa.Close()
	sb, err := dial()
	if err != nil {
		return nil, err
	}
	defer sb.Close()

	// A step left in doubt (its claimer froze or died mid-call) is decided
	// by asking the system of record: did the tool write its order row?
	findOrder := fs.Rebind(`SELECT COUNT(*) FROM ` + p + `orders WHERE task_id = ? AND step = ?`)
	ledger, err := task.NewLedger(ts, task.WithReconcile(func(ctx context.Context, d task.Doubt) (task.Resolution, error) {
		var n int
		if err := db.QueryRowContext(ctx, findOrder, d.Task, d.Step).Scan(&n); err != nil {
			return task.Resolution{}, err
		}
		say("  B finds step %s in doubt (claimed by epoch %d): order rows %d, so %s", d.Step, d.Epoch, n, map[bool]string{true: "it happened", false: "B runs it"}[n > 0])
		return task.Resolution{Applied: n > 0, Result: []byte("reconciled")}, nil
	}))
	if err != nil {
		return nil, err
	}

	// The scripted planner: one task, three steps, each a tool call that
	// the ledger runs at most once across epochs.
	id := "order-" + suffix
	plan := []string{"reserve", "charge", "ship"}
	doStep := func(cs *mcp.ClientSession, e task.Epoch, step string) (string, error) {
		eff, err := ledger.Do(ctx, e, step, []byte(step), func(ctx context.Context) ([]byte, error) {
			res, err := cs.CallTool(fencemcp.WithStep(ctx, e, step), &mcp.CallToolParams{Name: "order_step", Arguments: stepArgs{Item: id}})
			if err != nil {
				return nil, err
			}
			if r, ok := gosdk.Refused(res); ok && !r.Retry {
				return nil, task.NotApplied(fmt.Errorf("%w: %s", fencemcp.ErrSuperseded, text(res)))
			}
			if res.IsError {
				return nil, errors.New(text(res))
			}
			return []byte(text(res)), nil
		})
		if err != nil {
			return "", err
		}
		if eff.Replayed {
			return fmt.Sprintf("%s (replayed: committed by epoch %d)", eff.Result, eff.Epoch), nil
		}
		return string(eff.Result), nil
	}

	if err := ts.Create(ctx, id, task.Plan{Model: "scripted", Text: strings.Join(plan, ",")}); err != nil {
		return nil, err
	}
	ea, err := ts.Start(ctx, id)
	if err != nil {
		return nil, err
	}
	freezeEpoch = ea.Number()
	say("worker A starts task %s at epoch %d", id, ea.Number())
	r, err := doStep(sa, ea, "reserve")
	if err != nil {
		return nil, err
	}
	say("  A reserve      -> %s", r)
	aDone := make(chan error, 1)
	go func() { _, err := doStep(sa, ea, "charge"); aDone <- err }()
	<-frozen
	say("worker A freezes in the middle of its charge call (no renewals; as if SIGSTOPped)")
	var eb task.Epoch
	for {
		if eb, err = ts.Resume(ctx, id); err == nil {
			break
		}
		if !errors.Is(err, fence.ErrHeld) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond): // A's lease runs out by the database clock
		}
	}
	say("A's lease lapsed; worker B resumes the task at epoch %d", eb.Number())
	for _, step := range plan {
		r, err := doStep(sb, eb, step)
		if err != nil {
			return nil, fmt.Errorf("worker B step %s: %w", step, err)
		}
		say("  B %-12s -> %s", step, r)
	}
	if err := ts.Complete(ctx, eb, "order shipped"); err != nil {
		return nil, err
	}
	say("worker B completes the task at epoch %d", eb.Number())
	say("worker A thaws at epoch %d and goes on with its plan", ea.Number())
	thawOnce()
	if err := <-aDone; err != nil {
		refuse("its charge call", err)
	}
	// A's next step: the ledger refuses it before any call...
	if _, err := doStep(sa, ea, "ship"); err != nil {
		refuse("its own ledger", err)
	}
	// ...and a call that skips the ledger is refused by the MCP server.
	res, err := sa.CallTool(fencemcp.WithStep(ctx, ea, "ship"), &mcp.CallToolParams{Name: "order_step", Arguments: stepArgs{Item: id}})
	if err != nil {
		return nil, err
	}
	if _, ok := gosdk.Refused(res); ok {
		refuse("MCP server", errors.New(text(res)))
	}

	rep := &Report{Task: id, StaleEpoch: ea.Number(), NewEpoch: eb.Number(), Refusals: refusals, refusalText: why,
		Orders: map[string]int{}, Shipped: map[string]int{}, Steps: plan}
	for table, m := range map[string]map[string]int{"orders": rep.Orders, "shipments": rep.Shipped} {
		rows, err := db.QueryContext(ctx, `SELECT step, epoch FROM `+p+table+` ORDER BY step`)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "\n%s:\n", table)
		for rows.Next() {
			var step string
			var epoch int64
			if err := rows.Scan(&step, &epoch); err != nil {
				rows.Close()
				return nil, err
			}
			m[step]++
			fmt.Fprintf(out, "  %-8s epoch %d\n", step, epoch)
		}
		rows.Close()
	}
	return rep, nil
}

func text(res *mcp.CallToolResult) string {
	var s string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			s += t.Text
		}
	}
	return s
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	if len(s) > 150 {
		s = s[:150] + "…"
	}
	return s
}

func key() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(err)
	}
	return k
}
