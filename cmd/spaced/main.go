// Command spaced is the SPACE server: on a single node it runs the control
// plane and the worker in one process. `spaced worker` runs only this
// host's worker, behind the worker protocol, for a control plane on
// another host. See internal/server.
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
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(worker(os.Args[2:]))
	}
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

// worker runs `spaced worker` and returns the exit code.
func worker(args []string) int {
	cfg, err := server.ParseWorkerFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spaced worker:", err)
		return 2
	}
	log := server.NewLogger(os.Stderr, cfg.Config)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.RunWorker(ctx, cfg, log); err != nil {
		log.Error("spaced worker failed", "err", err)
		fmt.Fprintln(os.Stderr, "spaced worker:", err)
		return 1
	}
	return 0
}
