// Command space-agent is the guest agent. As PID 1 of a guest it boots the
// sandbox's root filesystem and serves the host over the virtio-serial port;
// otherwise (development and tests) it serves a unix socket or a named port.
// Build it static: CGO_ENABLED=0 go build ./cmd/space-agent.
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/space-sandbox/space/internal/agent"
)

var version = "dev"

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if os.Getpid() == 1 {
		agent.RunInit(log, version)
		return
	}
	listen := flag.String("listen", "", "serve on this unix socket path")
	port := flag.String("port", "", "serve on this character device (a virtio-serial port)")
	root := flag.String("root", "/", "directory the file operations treat as /")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	a := agent.New(agent.Config{Logger: log, Version: version, FileRoot: *root})
	var err error
	switch {
	case *listen != "":
		_ = os.Remove(*listen)
		var ln net.Listener
		if ln, err = net.Listen("unix", *listen); err == nil {
			err = a.ServeListener(ctx, ln)
		}
	case *port != "":
		err = a.ServePort(ctx, *port)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil && ctx.Err() == nil {
		log.Error("space-agent", "err", err)
		os.Exit(1)
	}
}
