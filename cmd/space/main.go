// Command space is the command line client of SPACE. See internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/space-sandbox/space/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Run(ctx, os.Args[1:], cli.Env{})
	stop()
	os.Exit(code)
}
