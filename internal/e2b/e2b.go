// Package e2b serves an E2B-compatible API on SPACE's listener, so that the
// official E2B SDKs work unchanged with E2B_API_URL and E2B_SANDBOX_URL both
// set to SPACE's URL. A request carrying E2b-Sandbox-Id is in-sandbox
// ("envd") traffic: the Connect-RPC process and filesystem services and the
// plain /files and /health routes, authorised by the sandbox's envd access
// token. Without that header, requests to E2B's REST paths are the control
// plane API (sandboxes, authorised by X-API-KEY, a SPACE key); every other
// request passes to the /v1 handler untouched.
//
// Every call goes to the domain, sandbox.Service, as the principal /v1's
// authenticator makes of the caller's key (or the tenant of the envd
// token), and is logged (tenant, key, result): sandbox reads, create,
// timeout, pause, resume, kill and the waits for their operations, and a
// sandbox's files and processes. The Service decides what /v1's handlers
// decide (validation, tenant scoping, quotas, states, operations), so both
// edges answer alike; E2B's calls carry no idempotency key. The package
// owns the translation, the Connect framing and the envd tokens' issue and
// check; it owns no sandbox state, never calls the store's sandboxes or a
// worker (internal/convention's TestEdgesCallTheService) and never makes
// an in-process request of /v1 (TestE2BCallsNoV1InProcess).
package e2b

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/portproxy"
	"github.com/space-sandbox/space/internal/store"
)

// EnvdVersion is the envd version reported to SDKs. It decides which
// features they use: 0.5.7 is the first with octet-stream uploads and
// stdin close, which this package serves.
const EnvdVersion = "0.5.7"

// EnvdPort is the port the SDKs address envd on.
const EnvdPort = "49983"

// Headers of E2B's sandbox traffic.
const (
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
	HeaderAccessToken = "X-Access-Token"
	HeaderAPIKey      = "X-Api-Key"
)

// defaultUser is the account E2B runs commands and file operations as
// when the SDK names none; the base template has it, with home /home/user.
const (
	defaultUser = "user"
	defaultHome = "/home/user"
)

// Config is the E2B front end's behaviour. Zero values take the defaults.
type Config struct {
	// RefuseInternet answers 403 to creates asking for
	// allow_internet_access: true.
	RefuseInternet bool
	// OpWait bounds how long a lifecycle call waits for its operation
	// (default 10m); E2B's API is synchronous.
	OpWait time.Duration
	// MaxUploadBytes bounds an envd upload's body, as /v1's
	// (default 1 GiB).
	MaxUploadBytes int64
	// Heartbeat is the silence after which a process stream sends a
	// keepalive (default 15s, /v1's).
	Heartbeat time.Duration
	// PreviewDomain is spaced's --preview-domain, create's and connect's
	// domain (ports.go); "" answers none.
	PreviewDomain string
}

// Handler serves the E2B API and passes everything else (requests that are
// not E2B's) to the /v1 handler.
type Handler struct {
	cfg       Config
	v1        http.Handler
	sandboxes Sandboxes
	auth      Authenticator
	tokens    EnvdTokens
	log       *slog.Logger
	rest      *http.ServeMux
	traffic   PortTraffic      // nil when the domain has no ports
	ports     *portproxy.Proxy // E2B's port traffic (ports.go)
}

// EnvdTokens keeps the sandboxes' envd access tokens, by hash: the one
// record this package owns (a store.Store).
type EnvdTokens interface {
	CreateEnvdToken(ctx context.Context, t *store.EnvdToken) error
	GetEnvdToken(ctx context.Context, sandboxID, hash string) (*store.EnvdToken, error)
}

// New returns a Handler in front of v1 (SPACE's API handler). sandboxes
// is the domain (sandbox.Service), au checks SPACE keys as /v1 does,
// tokens holds the envd tokens.
func New(cfg Config, v1 http.Handler, sandboxes Sandboxes, au Authenticator, tokens EnvdTokens, log *slog.Logger) *Handler {
	if cfg.OpWait <= 0 {
		cfg.OpWait = 10 * time.Minute
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = 1 << 30
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: cfg, v1: v1, sandboxes: sandboxes, auth: au, tokens: tokens, log: log}
	h.rest = h.restMux()
	h.ports = h.newPortProxy()
	return h
}

// restPrefixes are the first path segments of E2B's REST API. Requests
// under them (without the sandbox header) are E2B's; SPACE's own routes
// live under /v1, /healthz, /readyz, /metrics and /openapi.json.
var restPrefixes = []string{"sandboxes", "templates", "volumes", "snapshots", "teams", "nodes", "access-tokens", "api-keys"}

// isREST says whether a request without the sandbox header is for E2B's
// REST API. /v2/… and /v3/… are E2B's versioned routes, except /v1, which
// is SPACE's.
func isREST(path string) bool {
	if path == "/health" {
		return true
	}
	p := strings.TrimPrefix(path, "/")
	if v, rest, ok := strings.Cut(p, "/"); ok && (v == "v2" || v == "v3") {
		p = rest
	}
	first, _, _ := strings.Cut(p, "/")
	for _, pre := range restPrefixes {
		if first == pre {
			return true
		}
	}
	return false
}

// ServeHTTP routes by the sandbox header first, then by path.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Header.Get(HeaderSandboxID) != "":
		h.serveEnvd(w, r)
	case isREST(r.URL.Path):
		h.rest.ServeHTTP(w, r)
	default:
		h.v1.ServeHTTP(w, r)
	}
}
