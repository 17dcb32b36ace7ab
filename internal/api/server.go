// Package api is SPACE's public HTTP API (v1) for one control plane: routing,
// middleware (request ids, auth, body limits, idempotency, recovery, access
// log, metrics), decoding and validation, the conversion between the wire
// types (api/apiv1) and the domain's, event streams, and the OpenAPI
// document that describes the routes.
//
// Handlers return an error; one adapter (handle, errors.go) writes it, and
// errdefs classes become HTTP statuses exactly once (statusOf). What moves
// sandboxes through their lifecycle lives in internal/sandbox; api owns no
// persistence (internal/store), no operation scheduling
// (internal/operation) and no VM mechanics (internal/worker).
package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/keylock"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/portproxy"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/store"
)

// Config is the API's behaviour. Zero values take the documented defaults.
type Config struct {
	// Features lists the enabled feature gates (see KnownFeatures).
	Features []string
	// DefaultQuota is given to tenants created through the admin API.
	DefaultQuota store.Quota
	// MaxJSONBytes bounds JSON request bodies (default 1 MiB).
	MaxJSONBytes int64
	// MaxUploadBytes bounds file uploads and stdin bodies (default 1 GiB).
	MaxUploadBytes int64
	// ExecOutputBytes caps each of stdout and stderr of POST …/exec (default 1 MiB).
	ExecOutputBytes int
	// MaxWait caps ?wait= on GET /v1/operations/{id} (default 60s).
	MaxWait time.Duration
	// Heartbeat is the idle interval after which event streams send a
	// heartbeat (default 15s).
	Heartbeat time.Duration
	// A sandbox's default sizes, limits and worker name are the Service's
	// (sandbox.Config).

	// Read bounds of HTTPServer (see httpedge.go). A JSON body must arrive
	// whole within BodyTimeout; an upload (a route with a body limit of its
	// own) may take as long as it keeps arriving, each read within
	// UploadIdleTimeout. Once a body is in, or for bodyless requests (event
	// streams, long polls), there is no read deadline.
	ReadHeaderTimeout time.Duration // default 10s
	BodyTimeout       time.Duration // default 30s
	UploadIdleTimeout time.Duration // default 60s
	IdleTimeout       time.Duration // keep-alive; default 2m
	MaxHeaderBytes    int           // default 64 KiB

	// Preview is where preview URLs live: requests whose Host is under
	// Preview.Name go to the port proxy (default name "localhost").
	Preview portproxy.Domain
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.MaxJSONBytes <= 0 {
		c.MaxJSONBytes = 1 << 20
	}
	if c.MaxUploadBytes <= 0 {
		c.MaxUploadBytes = 1 << 30
	}
	def(&c.ExecOutputBytes, 1<<20)
	if c.MaxWait <= 0 {
		c.MaxWait = 60 * time.Second
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur(&c.ReadHeaderTimeout, 10*time.Second)
	defDur(&c.BodyTimeout, 30*time.Second)
	defDur(&c.UploadIdleTimeout, time.Minute)
	defDur(&c.IdleTimeout, 2*time.Minute)
	def(&c.MaxHeaderBytes, 64<<10)
	if c.Preview.Name == "" {
		c.Preview.Name = "localhost"
	}
}

// Deps are the parts the API drives.
type Deps struct {
	// Service is the control-plane domain the handlers call: the other
	// edges (the E2B-compatible API) get the same one (internal/server
	// builds it, with RequestID for its logs).
	Service *sandbox.Service
	// Store keeps the idempotency records, the one persistence the API
	// owns.
	Store  store.Store
	Ops    *operation.Engine
	Auth   *auth.Authenticator
	Logger *slog.Logger
	// Metrics may be nil (NewMetrics is then called). Pass the same value to
	// the worker (BootDuration) and the engine (Registry).
	Metrics *Metrics
	// Secrets stores tenants' secrets; nil answers the secrets routes 503.
	Secrets *secrets.Service
	// Ready, when set, answers /readyz instead of the worker's readiness
	// (sandbox.Service.WorkerReady): a control
	// plane is ready when its store and its view of the cluster are, with
	// or without a worker able to take a sandbox now.
	Ready func(ctx context.Context) error
}

// Server serves the API. It is an http.Handler.
type Server struct {
	cfg      Config
	features map[string]bool
	// idem keeps the idempotency records: the one persistence the edge
	// owns. Everything else of the store and the worker is the domain's,
	// reached through svc (internal/convention's TestEdgesCallTheService).
	idem    idempotencyRecords
	ops     *operation.Engine
	auth    *auth.Authenticator
	ready   func(ctx context.Context) error
	secrets *secrets.Service
	logger  *slog.Logger
	metrics *Metrics
	handler http.Handler
	routes  []route
	// svc is the control-plane domain the handlers call.
	svc *sandbox.Service
	// ports proxies to guest ports (preview hosts and the path form).
	ports *portproxy.Proxy

	// idemLocks serialises requests of one tenant with one idempotency key
	// in this process, so a concurrent repeat waits for the first answer
	// instead of racing it.
	idemLocks keylock.Map
}

// New builds the API server over deps.Service and registers the sandbox
// operation handlers (internal/sandbox) with deps.Ops, converting their
// results to the wire form operations record. After New, call
// deps.Ops.Recover and then Server.Reconcile with its result; run
// Server.Run for exit watching and expiry.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Service == nil || deps.Store == nil || deps.Ops == nil || deps.Auth == nil {
		return nil, fmt.Errorf("api: Service, Store, Ops and Auth are required")
	}
	cfg.setDefaults()
	features, err := featureSet(cfg.Features)
	if err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics()
	}
	s := &Server{
		cfg: cfg, features: features,
		idem: deps.Store, ops: deps.Ops, auth: deps.Auth, secrets: deps.Secrets,
		logger: deps.Logger, metrics: deps.Metrics, ready: deps.Ready, svc: deps.Service,
	}
	if s.ready == nil {
		s.ready = s.svc.WorkerReady
	}
	for typ, h := range s.svc.Handlers() {
		s.ops.Register(typ, s.recorded(h))
	}
	s.ports = s.newPortProxy()
	mux := http.NewServeMux()
	for _, rt := range s.routeTable() {
		s.routes = append(s.routes, rt)
		mux.Handle(rt.pattern, s.wrapRoute(rt))
	}
	s.handler = s.base(s.previewRouting(s.canonicalPaths(mux)))
	return s, nil
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// route is one registered route.
type route struct {
	pattern string // "METHOD /path"
	auth    authLevel
	limit   int64 // request body limit; 0 means MaxJSONBytes
	h       handlerFunc
	// proxy routes carry a guest's traffic: no idempotency, no body
	// limit, the body read as long as it arrives (proxyPort).
	proxy bool
}

func (s *Server) wrapRoute(rt route) http.Handler {
	h := s.handle(rt.h)
	if rt.proxy {
		return s.authenticate(rt.auth, h)
	}
	if rt.pattern[:5] == "POST " && rt.auth != authNone {
		h = s.idempotent(h)
	}
	limit := rt.limit
	if limit == 0 {
		limit = s.cfg.MaxJSONBytes
	}
	h = s.limitBody(limit, h)
	h = s.authenticate(rt.auth, h)
	if rt.limit > 0 { // uploads: read for as long as they progress
		h = s.uploadBody(h)
	}
	return h
}

func (s *Server) routeTable() []route {
	up := s.cfg.MaxUploadBytes
	return append([]route{
		{pattern: "GET /healthz", h: s.healthz},
		{pattern: "GET /readyz", h: s.readyz},
		{pattern: "GET /metrics", h: s.serveMetrics},
		{pattern: "GET /openapi.json", h: s.serveOpenAPI},

		{pattern: "GET /v1/version", h: s.getVersion},
		{pattern: "GET /v1/features", auth: authTenant, h: s.listFeatures},
		{pattern: "POST /v1/templates", auth: authTenant, h: s.createTemplate},
		{pattern: "GET /v1/templates", auth: authTenant, h: s.listTemplates},
		{pattern: "GET /v1/templates/{name}", auth: authTenant, h: s.getTemplate},
		{pattern: "DELETE /v1/templates/{name}", auth: authTenant, h: s.deleteTemplate},
		{pattern: "GET /v1/templates/{name}/builds/{operation}/log", auth: authTenant, h: s.templateBuildLog},

		{pattern: "GET /v1/operations", auth: authTenant, h: s.listOperations},
		{pattern: "GET /v1/operations/{id}", auth: authTenant, h: s.getOperation},
		{pattern: "POST /v1/operations/{id}/cancel", auth: authTenant, h: s.cancelOperation},

		{pattern: "POST /v1/sandboxes", auth: authTenant, h: s.createSandbox},
		{pattern: "GET /v1/sandboxes", auth: authTenant, h: s.listSandboxes},
		{pattern: "GET /v1/sandboxes/{id}", auth: authTenant, h: s.getSandbox},
		{pattern: "DELETE /v1/sandboxes/{id}", auth: authTenant, h: s.deleteSandbox},
		{pattern: "POST /v1/sandboxes/{id}/pause", auth: authTenant, h: s.pauseSandbox},
		{pattern: "POST /v1/sandboxes/{id}/suspend", auth: authTenant, h: s.suspendSandbox},
		{pattern: "POST /v1/sandboxes/{id}/wake", auth: authTenant, h: s.wakeSandbox},
		{pattern: "POST /v1/sandboxes/{id}/keep", auth: authTenant, h: s.keepSandbox},
		{pattern: "POST /v1/sandboxes/{id}/restore", auth: authTenant, h: s.restoreSandbox},
		{pattern: "POST /v1/sandboxes/{id}/checkpoints", auth: authTenant, h: s.createCheckpoint},
		{pattern: "GET /v1/sandboxes/{id}/checkpoints", auth: authTenant, h: s.listCheckpoints},
		{pattern: "GET /v1/checkpoints/{ckpt}", auth: authTenant, h: s.getCheckpoint},
		{pattern: "DELETE /v1/checkpoints/{ckpt}", auth: authTenant, h: s.deleteCheckpoint},
		{pattern: "PUT /v1/sandboxes/{id}/network", auth: authTenant, h: s.putNetwork},
		{pattern: "GET /v1/sandboxes/{id}/network/log", auth: authTenant, h: s.networkLog},
		{pattern: "GET /v1/sandboxes/{id}/ports", auth: authTenant, h: s.listPorts},
		{pattern: "POST /v1/sandboxes/{id}/ports/{port}/urls", auth: authTenant, h: s.createPortURL},
		{pattern: "GET /v1/sandboxes/{id}/ports/log", auth: authTenant, h: s.portLog},

		{pattern: "PUT /v1/secrets/{name}", auth: authTenant, h: s.putSecret},
		{pattern: "GET /v1/secrets", auth: authTenant, h: s.listSecrets},
		{pattern: "DELETE /v1/secrets/{name}", auth: authTenant, h: s.deleteSecret},

		{pattern: "POST /v1/sandboxes/{id}/commands", auth: authTenant, h: s.createCommand},
		{pattern: "GET /v1/sandboxes/{id}/commands", auth: authTenant, h: s.listCommands},
		{pattern: "GET /v1/sandboxes/{id}/commands/{cid}", auth: authTenant, h: s.getCommand},
		{pattern: "GET /v1/sandboxes/{id}/commands/{cid}/events", auth: authTenant, h: s.commandEvents},
		{pattern: "POST /v1/sandboxes/{id}/commands/{cid}/stdin", auth: authTenant, limit: up, h: s.commandStdin},
		{pattern: "POST /v1/sandboxes/{id}/commands/{cid}/signal", auth: authTenant, h: s.commandSignal},
		{pattern: "POST /v1/sandboxes/{id}/commands/{cid}/resize", auth: authTenant, h: s.commandResize},
		{pattern: "POST /v1/sandboxes/{id}/exec", auth: authTenant, h: s.exec},

		{pattern: "PUT /v1/sandboxes/{id}/files", auth: authTenant, limit: up, h: s.putFile},
		{pattern: "GET /v1/sandboxes/{id}/files", auth: authTenant, h: s.getFile},
		{pattern: "GET /v1/sandboxes/{id}/files/list", auth: authTenant, h: s.listFiles},
		{pattern: "DELETE /v1/sandboxes/{id}/files", auth: authTenant, h: s.deleteFile},

		{pattern: "POST /v1/admin/tenants", auth: authAdmin, h: s.createTenant},
		{pattern: "GET /v1/admin/tenants", auth: authAdmin, h: s.listTenants},
		{pattern: "GET /v1/admin/tenants/{name}/keys", auth: authAdmin, h: s.listKeys},
		{pattern: "PUT /v1/admin/tenants/{name}/quotas", auth: authAdmin, h: s.setQuotas},
		{pattern: "POST /v1/admin/tenants/{name}/keys", auth: authAdmin, h: s.createKey},
		{pattern: "DELETE /v1/admin/keys/{id}", auth: authAdmin, h: s.deleteKey},
		{pattern: "GET /v1/admin/workers", auth: authAdmin, h: s.listWorkers},
	}, proxyRoutes(s.proxyPort)...)
}

// proxyMethods are the methods the path form of the port proxy takes (GET
// includes HEAD).
var proxyMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// proxyPattern is the path form of the port proxy.
const proxyPattern = "/v1/sandboxes/{id}/ports/{port}/proxy/{path...}"

func proxyRoutes(h handlerFunc) []route {
	var out []route
	for _, m := range proxyMethods {
		out = append(out, route{pattern: m + " " + proxyPattern, auth: authTenant, h: h, proxy: true})
	}
	return out
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		s.log(r).Warn("not ready", "err", err)
		// What is missing is host detail; the admin reads it in the log.
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.refreshSandboxGauge(r.Context())
	promhttp.HandlerFor(s.metrics.Registry, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}

// refreshSandboxGauge counts sandboxes by state (all tenants) for a scrape.
func (s *Server) refreshSandboxGauge(ctx context.Context) {
	counts := map[store.SandboxState]int{}
	for sb, err := range store.All(ctx, s.svc.ListSandboxes, store.SandboxFilter{TenantID: store.AnyTenant, ExcludeStates: sandbox.Gone()}) {
		if err != nil {
			s.logger.Warn("metrics: list sandboxes", "err", err)
			return
		}
		counts[sb.State]++
	}
	for _, st := range sandbox.States() {
		if st == store.SandboxDeleted {
			continue
		}
		s.metrics.Sandboxes.WithLabelValues(string(st)).Set(float64(counts[st]))
	}
}

// ReconcileTemplates marks failed the template builds a restart interrupted
// (see sandbox.Service.ReconcileTemplates).
func (s *Server) ReconcileTemplates(ctx context.Context) error { return s.svc.ReconcileTemplates(ctx) }

// Reconcile makes the store and the worker agree after a start: run it after
// the operation engine's Recover (see sandbox.Service.Reconcile).
func (s *Server) Reconcile(ctx context.Context) error { return s.svc.Reconcile(ctx) }

// Run does the API's background work until ctx ends: the control plane's
// (sandbox.Service.Run: worker exits, expiry, idle suspend) and, hourly,
// pruning old idempotency records.
func (s *Server) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.pruneIdempotency(ctx)
	s.svc.Run(ctx)
}

// RunLeader is Run without the worker's exits: what a cluster's leader
// runs (expiry, idle suspend, pruning) until ctx ends.
func (s *Server) RunLeader(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.pruneIdempotency(ctx)
	s.svc.RunExpiry(ctx)
}

// RunExits handles the worker's exits until ctx ends or they close: every
// control replica of a cluster runs it (see sandbox.Service.RunExits).
func (s *Server) RunExits(ctx context.Context) { s.svc.RunExits(ctx) }

func (s *Server) pruneIdempotency(ctx context.Context) {
	tick := time.NewTicker(time.Hour)
	defer tick.Stop()
	for now := time.Now(); ; {
		if n, err := s.idem.PruneIdempotencyRecords(ctx, now.Add(-IdempotencyTTL)); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.logger.Warn("prune idempotency records", "err", err)
		} else if n > 0 {
			s.logger.Info("pruned idempotency records", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case now = <-tick.C:
		}
	}
}

// teardownTimeout bounds cleanup that must run even when the request or
// operation context is cancelled.
const teardownTimeout = 2 * time.Minute

// recorded converts what a sandbox operation handler returns into the wire
// form its operation records as its result.
func (s *Server) recorded(h operation.Handler) operation.Handler {
	return func(ctx context.Context, op *store.Operation, report operation.ProgressFunc) (any, error) {
		v, err := h(ctx, op, report)
		if err != nil {
			return nil, err
		}
		switch v := v.(type) {
		case *store.Sandbox:
			return s.sandboxView(v), nil
		case sandbox.Status:
			out := s.sandboxView(v.Sandbox)
			if v.Worker != nil {
				out.Usage = usageOf(*v.Worker)
			}
			return out, nil
		case *store.Checkpoint:
			return toCheckpoint(v), nil
		case sandbox.BuildResult:
			return buildResult{Template: toTemplate(v.Template), Warnings: v.Warnings}, nil
		}
		return v, nil
	}
}

// ReconcileTakenOver makes the targets of operations taken over from a lost
// control replica true (see sandbox.Service.ReconcileTakenOver): pass it to
// the operation engine as its TakenOver.
func (s *Server) ReconcileTakenOver(ctx context.Context, op *store.Operation) (rerun bool) {
	return s.svc.ReconcileTakenOver(ctx, op)
}

// ReconcileLive fails running and paused sandboxes whose VM is gone (see
// sandbox.Service.ReconcileLive): a cluster leader's loop.
func (s *Server) ReconcileLive(ctx context.Context) error { return s.svc.ReconcileLive(ctx) }
