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
	"github.com/space-sandbox/space/internal/portproxy"
	"github.com/space-sandbox/space/internal/sandbox"
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
	templates sandbox.TemplateDeps
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

// startAPI starts the operation engine, builds the domain (sandbox.Service)
// and the API over it from p. td closes the engine (bounded) when the
// process ends. The other edges get the same Service (serveAPI).
func startAPI(cfg Config, p apiParts, td *teardown, log *slog.Logger) (*api.Server, *sandbox.Service, *operation.Engine, error) {
	ops := operation.New(operation.Config{Store: p.db, Logger: log, Registerer: p.metrics.Registry,
		Concurrency: cfg.OperationConcurrency, TenantShare: cfg.OperationTenantShare, Owner: p.owner, LeaseTTL: p.leaseTTL, TakenOver: p.takenOver})
	td.add(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ops.Close(cctx)
	})
	svc, err := sandbox.New(sandbox.Config{}, sandbox.Deps{Store: p.db, Ops: ops, Worker: p.worker, Logger: log,
		RequestID: api.RequestID, Templates: p.templates})
	if err != nil {
		return nil, nil, nil, err
	}
	preview := portproxy.Domain{Name: cfg.PreviewDomain, TLS: cfg.APITLSCertFile != ""}
	srv, err := api.New(api.Config{Features: cfg.Features, DefaultQuota: cfg.DefaultQuota, Preview: preview}, api.Deps{
		Service: svc, Store: p.db, Ops: ops, Auth: p.auth, Logger: log, Metrics: p.metrics, Secrets: p.secrets,
		Ready: p.ready,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return srv, svc, ops, nil
}

// serveAPI serves srv (with the E2B-compatible API on the same listener,
// over the same Service svc and key checks authn) on cfg.Listen until ctx ends, then shuts down: 15s for requests to end,
// then open streams are cut. ready runs once the listener is bound. Each
// of mounts wraps the handler, outermost last (the control plane's
// internal routes for its workers go there, in front of the API's auth).
func serveAPI(ctx context.Context, cfg Config, srv *api.Server, svc *sandbox.Service, authn *auth.Authenticator, db store.Store, log *slog.Logger, ready func(addr string),
	mounts ...func(http.Handler) http.Handler) error {
	tlsConfig, err := apiTLS(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	hs := srv.HTTPServer(slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	hs.TLSConfig = tlsConfig
	apiHandler := hs.Handler
	// The E2B-compatible API shares the listener; it passes /v1 through.
	hs.Handler = e2b.New(e2b.Config{RefuseInternet: cfg.E2BRefuseInternet, PreviewDomain: cfg.PreviewDomain}, hs.Handler, svc, authn, db, log)
	for _, mount := range mounts {
		hs.Handler = mount(hs.Handler)
	}
	serveErr := make(chan error, 2)
	if cfg.MetricsListen != "" {
		_, stop, err := serveMetrics(cfg.MetricsListen, apiHandler, serveErr, log)
		if err != nil {
			ln.Close()
			return err
		}
		defer stop()
		hs.Handler = withoutMetrics(hs.Handler)
	}
	// A preview host's request is its guest's whatever its path or
	// headers: none of the front ends above may take it.
	hs.Handler = srv.PreviewFirst(hs.Handler)
	ready(ln.Addr().String())
	go func() {
		l := srv.Listener(limitPerClient(ln, cfg.MaxConnsPerClient, log))
		if tlsConfig != nil {
			serveErr <- hs.ServeTLS(l, "", "")
			return
		}
		serveErr <- hs.Serve(l)
	}()
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

// serveMetrics serves GET /metrics of api (and nothing else) on addr, its
// own listener, which a NetworkPolicy or a bind to loopback can keep from
// tenants; a failure to serve goes to errc. It returns the bound address;
// stop closes it.
func serveMetrics(addr string, api http.Handler, errc chan<- error, log *slog.Logger) (bound string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", api)
	ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	log.Info("metrics served on their own listener", "metrics_listen", ln.Addr().String())
	go func() {
		if err := ms.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics listener: %w", err)
		}
	}()
	return ln.Addr().String(), func() { _ = ms.Close() }, nil
}

// withoutMetrics answers /metrics 404, for the API's port when metrics
// have a listener of their own.
func withoutMetrics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			http.NotFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
