package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is the module version of the running binary, or "devel" when it
// was not built from a tagged module (go build in a checkout).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print fence's version",
		Long: `Print fence's module version ("devel" when built from a checkout), the Go
version and the platform. With --json: {"version", "go", "platform"}.`,
		Example: `  fence version
  go install github.com/fencekit/fence/cmd/fence@latest && fence version`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			platform := runtime.GOOS + "/" + runtime.GOARCH
			if a.json {
				return writeJSON(a.stdout, map[string]string{
					"version": version(), "go": runtime.Version(), "platform": platform})
			}
			_, err := fmt.Fprintf(a.stdout, "fence %s (%s %s)\n", version(), runtime.Version(), platform)
			return err
		},
	}
}
