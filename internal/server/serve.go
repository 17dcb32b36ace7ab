package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/space-sandbox/space/internal/api"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/e2b"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/worker"
)

// apiParts is what the single-node server and the control plane wire the
// same way above their worker: the operation engine and the API.
type apiParts struct {
	db        store.Store
	auth      *auth.Authenticator
	worker    worker.Worker
	metrics   *api.Metrics
	secrets   *secrets.Service // nil: the secrets routes answer 503
	templates api.TemplateDeps
	// owner names this process in operation leases; leaseTTL is their
	// length (0: the engine's default).
	owner    string
	leaseTTL time.Duration
	// takenOver settles the target of a running operation the engine took
	// over because its replica's lease ran out, before the engine ends it
	// (or reruns it, when it says so); nil: none expected.
	takenOver func(ctx context.Context, op *store.Operation) (rerun bool)
	// ready, when set, answers /readyz instead of the worker.
	ready func(ctx context.Context) error
}

// startAPI starts the operation engine and builds the API over p. td
// closes the engine (bounded) when the process ends.
func startAPI(cfg Config, p apiParts, td *teardown, log *slog.Logger) (*api.Server, *operation.Engine, error) {
	ops := operation.New(operation.Config{Store: p.db, Logger: log, Registerer: p.metrics.Registry,
		Owner: p.owner, LeaseTTL: p.leaseTTL, TakenOver: p.takenOver})
	td.add(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ops.Close(cctx)
	})
	srv, err := api.New(api.Config{Features: cfg.Features, DefaultQuota: cfg.DefaultQuota}, api.Deps{
		Store: p.db, Ops: ops, Auth: p.auth, Worker: p.worker, Logger: log, Metrics: p.metrics, Secrets: p.secrets,
		Templates: p.templates, Ready: p.ready,
	})
	if err != nil {
		return nil, nil, err
	}
	return srv, ops, nil
}

// serveAPI serves srv (with the E2B-compatible API on the same listener)
// on cfg.Listen until ctx ends, then shuts down: 15s for requests to end,
// then open streams are cut. ready runs once the listener is bound. Each
// of mounts wraps the handler, outermost last (the control plane's
// internal routes for its workers go there, in front of the API's auth).
func serveAPI(ctx context.Context, cfg Config, srv *api.Server, db store.Store, log *slog.Logger, ready func(addr string),
	mounts ...func(http.Handler) http.Handler) error {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	hs := srv.HTTPServer(slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	// The E2B-compatible API shares the listener; it passes /v1 through.
	hs.Handler = e2b.New(e2b.Config{RefuseInternet: cfg.E2BRefuseInternet}, hs.Handler, srv.Service(), srv.Authenticator(), db, log)
	for _, mount := range mounts {
		hs.Handler = mount(hs.Handler)
	}
	ready(ln.Addr().String())
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(srv.Listener(limitPerClient(ln, cfg.MaxConnsPerClient, log))) }()
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close() // streams still open after the grace period are cut
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
