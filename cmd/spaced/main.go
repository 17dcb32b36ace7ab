// Command spaced is the SPACE server: on a single node it runs the control
// plane and the worker in one process. In a cluster, `spaced control` runs
// one replica of the control plane (API, store, operations; sandboxes
// placed by Kubernetes) and `spaced worker` this host's worker behind the
// worker protocol. See internal/server.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/space-sandbox/space/internal/server"
)

func main() {
	mode, args := "", os.Args[1:]
	if len(args) > 0 && (args[0] == "worker" || args[0] == "control") {
		mode, args = args[0], args[1:]
	}
	switch mode {
	case "worker":
		cfg, err := server.ParseWorkerFlags(args)
		os.Exit(run("spaced worker", cfg.Config, err, func(ctx context.Context, log *slog.Logger) error {
			return server.RunWorker(ctx, cfg, log)
		}))
	case "control":
		cfg, err := server.ParseControlFlags(args)
		os.Exit(run("spaced control", cfg.Config, err, func(ctx context.Context, log *slog.Logger) error {
			return server.RunControl(ctx, cfg, log)
		}))
	default:
		cfg, err := server.ParseFlags(args)
		os.Exit(run("spaced", cfg, err, func(ctx context.Context, log *slog.Logger) error {
			return server.Run(ctx, cfg, log)
		}))
	}
}

// run runs one mode until SIGINT or SIGTERM and returns the exit code: 2
// for bad flags, 1 for a failure.
func run(name string, cfg server.Config, flagErr error, fn func(ctx context.Context, log *slog.Logger) error) int {
	if flagErr != nil {
		fmt.Fprintln(os.Stderr, name+":", flagErr)
		return 2
	}
	log := server.NewLogger(os.Stderr, cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := fn(ctx, log); err != nil {
		log.Error(name+" failed", "err", err)
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	return 0
}
