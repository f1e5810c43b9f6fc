package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"
)

// demoAgentCommand is the program fence demo agent runs. The story needs an
// MCP server and client, and the fence command links no MCP SDK (issue 30:
// the core module's users stay free of MCP dependencies), so it lives in
// the fencemcp module (fencemcp/cmd/fence-demo-agent), as fence bench's
// Redis peers live in a module of their own.
const demoAgentCommand = "fence-demo-agent"

const demoAgentLong = `Show a zombie agent refused at every hop: a scripted planner (no model)
runs a three-step task through an MCP server over streamable HTTP (the
official Go SDK) whose tool writes to the database and calls a downstream
HTTP service guarded by fencehttp. Worker A freezes in the middle of a tool
call (held in the server, no renewals, as if SIGSTOPped), its lease lapses,
worker B resumes the task and finishes it; A thaws and is refused by the
downstream service (412), by the tool's database write, by the MCP server
("superseded, do not retry") and by its own effect ledger. The output ends
with a verdict per hop; the exit status is 0 only if every refusal happened
and each step's effect landed exactly once.

The database is SQLite in a temporary directory unless --dsn is given
(PostgreSQL, MySQL/MariaDB or SQLite; the demo's tables get a fresh prefix
and are left there). FENCE_DSN is not used: the demo does not write into
your fence database unless you name it.

This runs ` + demoAgentCommand + `, a command of the fencemcp module (so that
fence itself links no MCP SDK), found next to this executable, on $PATH, or
at $FENCE_DEMO_AGENT. Install it with
  go install github.com/fencekit/fence/fencemcp/cmd/fence-demo-agent@latest`

func (a *app) demoAgentCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "agent",
		Short: "Show a frozen MCP agent refused at every hop after a takeover",
		Long:  demoAgentLong,
		Example: `  fence demo agent
  fence demo agent --dsn 'postgres://postgres@127.0.0.1:5432/demo?sslmode=disable'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			prog, err := a.findDemoAgent()
			if err != nil {
				return fail(ExitNotFound, err, "go install github.com/fencekit/fence/fencemcp/cmd/fence-demo-agent@latest (or, in a checkout: cd fencemcp && go build -o <the directory of fence> ./cmd/fence-demo-agent)")
			}
			var argv []string
			if cmd.Flags().Changed("dsn") || cmd.Flags().Changed("dsn-file") {
				argv = append(argv, "--dsn", a.dsn)
			}
			c := exec.CommandContext(ctx, prog, argv...)
			c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
			c.Stdin, c.Stdout, c.Stderr, c.Env = nil, a.stdout, a.stderr, a.env
			err = c.Run()
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee):
				return fail(ExitFailure, fmt.Errorf("%s exited with status %d: the story did not end as it must (see its verdict above)", demoAgentCommand, ee.ExitCode()), "")
			case err != nil:
				return fail(ExitCannotExec, err, "")
			}
			return nil
		},
	}
}

// findDemoAgent looks for the demo's program at $FENCE_DEMO_AGENT, next to
// this executable, then on the environment's $PATH.
func (a *app) findDemoAgent() (string, error) {
	if p := a.getenv("FENCE_DEMO_AGENT"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("FENCE_DEMO_AGENT=%s: %w", clip(p), err)
		}
		return p, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), demoAgentCommand)
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	for _, dir := range filepath.SplitList(a.getenv("PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, demoAgentCommand)
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not installed (not at $FENCE_DEMO_AGENT, not next to this executable, not on $PATH): it is a command of the fencemcp module, so that fence links no MCP SDK", demoAgentCommand)
}
