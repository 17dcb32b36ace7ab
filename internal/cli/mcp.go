package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/mcp"
)

// mcpCmd serves SPACE's tools to an MCP client: over stdin/stdout (nothing
// else is written to stdout) or, with --http, over streamable HTTP where
// every caller authenticates with its own SPACE key.
func mcpCmd(env *Env) *cobra.Command {
	var addr string
	var verbose bool
	return command(env, "mcp", func(fs *pflag.FlagSet) {
		fs.StringVar(&addr, "http", "", "serve the streamable HTTP transport on ADDR (host:port) instead of stdio")
		fs.BoolVarP(&verbose, "verbose", "v", false, "log each failed tool call to stderr")
	}, func(ctx context.Context, _ *call) error { return serveMCP(ctx, env, &addr, &verbose) })
}

func serveMCP(ctx context.Context, env *Env, addr *string, verbose *bool) error {
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
	url := os.Getenv("SPACE_URL")
	if url == "" {
		url = client.DefaultURL
	}
	cfg := mcp.Config{URL: url, Logger: logger}
	if *addr == "" {
		cfg.APIKey = os.Getenv("SPACE_API_KEY")
		if cfg.APIKey == "" {
			return fmt.Errorf("SPACE_API_KEY is not set: %w", errdefs.ErrUnauthenticated)
		}
	}
	srv, err := mcp.New(cfg)
	if err != nil {
		return err
	}
	if *addr == "" {
		return srv.ServeStdio(ctx, io.NopCloser(env.Stdin), nopWriteCloser{env.Stdout})
	}
	return serveMCPHTTP(ctx, *addr, srv, env, logger)
}

func serveMCPHTTP(ctx context.Context, addr string, srv *mcp.Server, env *Env, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.HTTPHandler(), ReadHeaderTimeout: 30 * time.Second}
	fmt.Fprintf(env.Stderr, "space mcp: serving MCP (streamable HTTP) on http://%s/\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		logger.Warn("mcp http shutdown", "err", err)
		hs.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
