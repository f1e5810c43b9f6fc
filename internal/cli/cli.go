package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// Main runs the fence command line with args (without the program name) and
// returns the exit status. It keeps no global state: the command tree is
// built per call, so tests can call it in-process. env is the environment
// (os.Environ()): it supplies FENCE_DSN, FENCE_PREFIX and NO_COLOR, and it is
// what `fence run` passes to its command.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, env []string) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, env: env,
		log: slog.New(slog.DiscardHandler)}
	if ownsProcess(ctx) {
		// Before anything reads the DSN: a job of the same user must not
		// read it from /proc/<fence pid>/environ (see undumpable).
		if err := undumpable(); err != nil {
			fmt.Fprintf(stderr, "fence: warning: cannot hide this process's environment from other processes of this user: %v\n", err)
		}
	}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var es exitStatus
	if errors.As(err, &es) {
		return int(es) // the command's own status; it has spoken for itself
	}
	if cmd == nil {
		cmd = root
	}
	code, hint := classify(err, cmd.CommandPath())
	line := cmd.CommandPath() + ": " + a.scrub(oneLine(err.Error()))
	if hint != "" {
		line += "; hint: " + hint
	}
	fmt.Fprintln(stderr, line)
	return code
}

// app is one invocation's configuration and I/O.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	env            []string

	// Global flags.
	dsnFlag, prefixFlag string
	dsnFile             string
	json                bool
	logLevel            string

	// Resolved in the root's PersistentPreRunE.
	dsn    string // --dsn, else FENCE_DSN, else fencedsn.Default
	parsed fencedsn.DSN
	prefix string
	log    *slog.Logger
}

// getenv returns the first value of key in the environment, like os.Getenv.
func (a *app) getenv(key string) string {
	for _, kv := range a.env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

const rootLong = `fence runs singleton jobs under fenced leases over SQL (SQLite, PostgreSQL,
MySQL/MariaDB). The lease decides who may start a job; a strictly increasing
fence token decides who may still finish it: a worker that paused, was
partitioned or was replaced can no longer record its completion once a newer
owner took over.

Database: --dsn, else $FENCE_DSN, else sqlite:fence.db (a file in the current
directory, nothing to install). DSN forms:
  sqlite:PATH
  postgres://user:pass@host:5432/db?sslmode=disable
  mysql://user:pass@host:3306/db
Passwords are never printed. Table prefix: --prefix, else $FENCE_PREFIX, else
fence_. Colour only on a terminal, and never with $NO_COLOR set.

Exit status: 0 ok, 1 error, 64 usage error, 69 database unreachable;
'fence run' also 75 (lease held by another owner), 76 (lease lost or
completion rejected) and otherwise its command's own status.`

const rootExample = `  fence migrate
  fence run --lease nightly-report -- ./report.sh --since yesterday
  fence leases
  fence runs --lease nightly-report --limit 5
  FENCE_DSN=postgres://app@db:5432/app fence leases --json
  fence demo`

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:                        "fence",
		Short:                      "Fenced leases for singleton jobs over SQL",
		Long:                       rootLong,
		Example:                    rootExample,
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
		// Args is set so that an unknown command reaches RunE as a usage
		// error with exit 64 instead of cobra's own handling.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			hint := "'fence help' lists the commands"
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = "did you mean '" + cmd.CommandPath() + " " + s[0] + "'?"
			}
			arg := args[0]
			if d, err := fencedsn.Parse(arg); err == nil {
				arg = d.Redacted // a DSN typed where a command goes
			}
			return usagef(hint, "unknown command %q", clip(arg))
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return a.setup(cmd)
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usagef("see '"+cmd.CommandPath()+" --help'", "%v", err)
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.dsnFlag, "dsn", "", "database `DSN` (default $FENCE_DSN, else "+fencedsn.Default+")")
	pf.StringVar(&a.dsnFile, "dsn-file", "", "read the database DSN from `FILE` (its first line), keeping the password out of argv and ps")
	pf.StringVar(&a.prefixFlag, "prefix", "", "table `prefix` (default $FENCE_PREFIX, else "+fence.DefaultPrefix+")")
	pf.BoolVar(&a.json, "json", false, "print listings as JSON (leases, runs, release, migrate, version)")
	pf.StringVar(&a.logLevel, "log-level", "error", "log `level` on stderr: debug, info, warn or error")

	root.AddCommand(
		a.migrateCmd(),
		a.runCmd(),
		a.leasesCmd(),
		a.runsCmd(),
		a.revokeCmd(),
		a.releaseCmd(),
		a.raiseFencesCmd(),
		a.demoCmd(),
		a.versionCmd(),
		a.serveCmd(),
		a.benchCmd(),
	)
	for _, c := range root.Commands() {
		c.DisableFlagsInUseLine = true // each Use line already shows its flags
	}
	return root
}

// setup resolves the global flags before any command runs.
func (a *app) setup(cmd *cobra.Command) error {
	var lvl slog.Level
	switch strings.ToLower(a.logLevel) {
	case "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "warn", "warning":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	default:
		return usagef("use debug, info, warn or error", "unknown --log-level %q", clip(a.logLevel))
	}
	a.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: lvl}))

	a.dsn = a.dsnFlag
	if cmd.Flags().Changed("dsn-file") {
		if cmd.Flags().Changed("dsn") {
			return usagef("give one of them", "--dsn and --dsn-file are both set")
		}
		dsn, err := readDSNFile(a.dsnFile)
		if err != nil {
			return err
		}
		a.dsn = dsn
	} else if !cmd.Flags().Changed("dsn") {
		a.dsn = a.getenv("FENCE_DSN")
		if a.dsn == "" {
			a.dsn = fencedsn.Default
		}
	}
	a.prefix = a.prefixFlag
	if !cmd.Flags().Changed("prefix") {
		a.prefix = a.getenv("FENCE_PREFIX")
		if a.prefix == "" {
			a.prefix = fence.DefaultPrefix
		}
	}
	if err := fence.ValidatePrefix(a.prefix); err != nil {
		return usagef("a prefix is a letter or underscore, then up to 40 letters, digits or underscores", "--prefix: %v", err)
	}
	return nil
}

// readDSNFile reads a DSN from the first line of path. Errors name the
// file, never its content.
func readDSNFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", usagef("the file holds one line: the DSN", "--dsn-file %q: %v", clip(path), err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSpace(line)
	if line == "" {
		return "", usagef("the file holds one line: the DSN", "--dsn-file %q: the first line is empty", clip(path))
	}
	return line, nil
}

// parseDSN checks the DSN's form; the error never contains the password.
func (a *app) parseDSN() error {
	d, err := fencedsn.Parse(a.dsn)
	if err != nil {
		return usagef("use sqlite:PATH, postgres://user:pass@host:5432/db or mysql://user:pass@host:3306/db", "%v", err)
	}
	a.parsed = d
	return nil
}

// openTimeout bounds connecting to the database.
const openTimeout = 15 * time.Second

// open opens the store. With needSchema it also checks that `fence migrate`
// has been run, so a fresh database gives a hint instead of a SQL error.
func (a *app) open(ctx context.Context, needSchema bool, opts ...fence.Option) (*fence.Store, error) {
	if err := a.parseDSN(); err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	s, err := fencedsn.Open(octx, a.dsn, append([]fence.Option{fence.WithPrefix(a.prefix), fence.WithLogger(a.log)}, opts...)...)
	if err != nil {
		if octx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: %s did not answer within %v", fence.ErrUnavailable, a.parsed.Redacted, openTimeout)
		}
		return nil, err
	}
	if !needSchema {
		return s, nil
	}
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		s.Close()
		return nil, err
	}
	if v == 0 {
		s.Close()
		return nil, fail(ExitFailure,
			fmt.Errorf("%s has no fence tables with prefix %s", a.parsed.Redacted, a.prefix),
			"run 'fence migrate' first, with the same --dsn and --prefix")
	}
	return s, nil
}

// scrub removes the DSN's password from a message, in case an error from
// below repeats it. fence's own errors already never contain it.
func (a *app) scrub(msg string) string {
	if a.dsn == "" || a.parsed.Redacted == "" || a.parsed.Redacted == a.dsn {
		return msg
	}
	return strings.ReplaceAll(msg, a.dsn, a.parsed.Redacted)
}

// interruptible returns ctx cancelled by SIGINT or SIGTERM, for the commands
// that have no child to forward them to.
func interruptible(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// clip keeps hostile or huge input out of messages.
func clip(s string) string {
	const max = 60
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
