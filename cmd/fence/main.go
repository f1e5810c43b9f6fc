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
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Environ()))
}
