// Command spaced is the SPACE server: on a single node it runs the control
// plane and the worker in one process. See internal/server.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/space-sandbox/space/internal/server"
)

func main() {
	cfg, err := server.ParseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "spaced:", err)
		os.Exit(2)
	}
	log := server.NewLogger(os.Stderr, cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, cfg, log); err != nil {
		log.Error("spaced failed", "err", err)
		fmt.Fprintln(os.Stderr, "spaced:", err)
		os.Exit(1)
	}
}
