package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) migrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade fence's tables",
		Long: `Create or upgrade fence's tables (<prefix>leases, <prefix>runs,
<prefix>schema, and the task package's <prefix>tasks and <prefix>task_steps)
and print the schema version. It is idempotent and safe to run
from several processes at once; run it before the first 'fence run' and after
upgrading fence.

With --json it prints {"schema_version": N, "prefix": "fence_"}.`,
		Example: `  fence migrate
  fence migrate --dsn postgres://app@db:5432/app --prefix jobs_`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			s, err := a.open(ctx, false)
			if err != nil {
				return err
			}
			defer s.Close()
			v, err := s.Migrate(ctx)
			if err != nil {
				return err
			}
			if a.json {
				return writeJSON(a.stdout, struct {
					SchemaVersion int    `json:"schema_version"`
					Prefix        string `json:"prefix"`
				}{v, a.prefix})
			}
			p := a.prefix
			_, err = fmt.Fprintf(a.stdout, "schema version %d (tables %sleases, %sruns, %sschema, %stasks, %stask_steps on %s)\n",
				v, p, p, p, p, p, a.parsed.Redacted)
			return err
		},
	}
}

// noArgs is cobra.NoArgs as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("see '"+cmd.CommandPath()+" --help'", "unexpected argument %q", clip(args[0]))
	}
	return nil
}
