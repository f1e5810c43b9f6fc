// Command fence runs singleton jobs under fenced leases over SQL: the lease
// decides who may start a job, a strictly increasing fence token decides who
// may still finish it. Run `fence help` for the commands; see README.md.
package main

import (
	"context"
	"os"

	"github.com/fencekit/fence/internal/cli"
)

func main() {
	// fence run starts its command under this same binary as a shim
	// (fence __shim …), which keeps the command's tree inside the lease.
	if len(os.Args) > 1 && os.Args[1] == cli.ShimCommand {
		os.Exit(cli.Shim(os.Args[2:]))
	}
	os.Exit(cli.Main(cli.AsProcess(context.Background()), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Environ()))
}
