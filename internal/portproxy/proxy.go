// Package portproxy is the edge that carries HTTP to a server inside a
// sandbox: preview hosts ({port}-{sandbox_id}.{preview_domain}, ParseHost),
// who may pass (a port URL's token in X-Space-Port-Token, ?space_token=
// once then a cookie, the owner's API key, or a public URL), and a reverse
// proxy (net/http/httputil.ReverseProxy) whose connections to the guest
// are sandbox.Service.DialPort streams over the agent link. Streamed
// bodies both ways, Upgrade (WebSocket), X-Forwarded-*, and JSON errors in
// the API's shape through the writer its mounting edge gives it.
//
// It decides nothing of the domain: tokens, tenants, states and the audit
// log are sandbox.Service's; it never calls the store or a worker.
package portproxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
)

// Service is what the proxy needs of the domain (sandbox.Service).
type Service interface {
	AuthorizePort(ctx context.Context, sandboxID string, port uint16, token string) (sandbox.PortGrant, error)
	DialPort(ctx context.Context, tenant, sandboxID string, port uint16) (*sandbox.PortConn, error)
	RecordPortConnection(ctx context.Context, rec sandbox.PortConnection)
}

// Config is what the mounting edge gives the proxy.
type Config struct {
	Service Service
	// Domain is the preview domain (the Host form's suffix).
	Domain string
	// AuthenticateKey checks an API key (the bearer token of an
	// Authorization header) and returns the tenant whose sandboxes it opens
	// (store.AnyTenant for an admin key) and the key's id, for the audit.
	AuthenticateKey func(ctx context.Context, key string) (tenant, keyID string, err error)
	// WriteError answers err in the edge's error shape; a status other
	// than 0 replaces the one err's class maps to (502 for a port nothing
	// listens on).
	WriteError func(w http.ResponseWriter, r *http.Request, status int, err error)
	Logger     *slog.Logger
	// MaxResponseHeaderBytes bounds a guest's response headers (default
	// 64 KiB).
	MaxResponseHeaderBytes int64
}

// Proxy serves requests to guest ports. It is safe for concurrent use.
type Proxy struct {
	cfg Config
	rp  *httputil.ReverseProxy
}

// New builds the proxy.
func New(cfg Config) *Proxy {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxResponseHeaderBytes <= 0 {
		cfg.MaxResponseHeaderBytes = 64 << 10
	}
	p := &Proxy{cfg: cfg}
	p.rp = &httputil.ReverseProxy{
		Rewrite: rewrite,
		// Every connection to a guest is a fresh agent-link stream, made
		// for one request and closed after it (DisableKeepAlives): no idle
		// connection outlives a paused, stopped or deleted sandbox, and
		// each request's bytes are its own in the audit log. Opening a
		// stream is one round trip on a link that is already up.
		Transport: &http.Transport{
			DialContext:            p.dial,
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: cfg.MaxResponseHeaderBytes,
			ExpectContinueTimeout:  time.Second,
		},
		// Answers flow as the guest writes them (SSE, long downloads).
		FlushInterval: -1,
		ErrorHandler:  p.proxyError,
		ErrorLog:      slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	return p
}

// Target is an authorised request's destination: a port of a sandbox,
// for the tenant the caller proved (store.AnyTenant for an admin key), and
// what let it in (for the audit log: "key:ID", "token:ID", "public:ID").
type Target struct {
	Tenant  string
	Sandbox string
	Port    uint16
	Via     string
}

// exchange is one proxied request's state, between Forward, the
// transport's dial and the error handler.
type exchange struct {
	target  Target
	mu      sync.Mutex
	conn    *sandbox.PortConn
	dialErr error
}

type exchangeKey struct{}

// Forward proxies r to t. The caller has authorised it and stripped what
// authenticated it; r.URL.Path is what the guest gets.
func (p *Proxy) Forward(w http.ResponseWriter, r *http.Request, t Target) {
	started := time.Now().UTC()
	ex := &exchange{target: t}
	sw := &statusRecorder{ResponseWriter: w}
	p.rp.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex)))
	ex.mu.Lock()
	conn := ex.conn
	ex.mu.Unlock()
	rec := sandbox.PortConnection{Sandbox: t.Sandbox, Port: t.Port, Tenant: t.Tenant, Via: t.Via, Remote: r.RemoteAddr,
		Started: started, Ended: time.Now().UTC(), Status: sw.status}
	if conn != nil {
		conn.Close()
		rec.BytesIn, rec.BytesOut = conn.Bytes()
		if rec.Status == 0 { // an upgrade: the proxy wrote the 101 on the hijacked connection
			rec.Status = http.StatusSwitchingProtocols
		}
	}
	p.cfg.Service.RecordPortConnection(r.Context(), rec)
}

// dial opens the request's connection to the guest (addr is a label).
func (p *Proxy) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	ex, ok := ctx.Value(exchangeKey{}).(*exchange)
	if !ok {
		return nil, errdefs.New(errdefs.ErrInternal, "port proxy: request without a target")
	}
	c, err := p.cfg.Service.DialPort(ctx, ex.target.Tenant, ex.target.Sandbox, ex.target.Port)
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if err != nil {
		ex.dialErr = err
		return nil, err
	}
	ex.conn = c
	return c, nil
}

// rewrite makes the guest's request: to the port's server with the
// client's Host, X-Forwarded-For/Host/Proto set by the proxy (what the
// client sent of them is dropped).
func rewrite(pr *httputil.ProxyRequest) {
	ex := pr.In.Context().Value(exchangeKey{}).(*exchange)
	pr.Out.URL.Scheme = "http"
	// The transport keys connections by this host: one of the sandbox's
	// own, so that no connection of one sandbox ever serves a request for
	// another (the dial ignores it and asks DialPort).
	pr.Out.URL.Host = net.JoinHostPort(strings.ReplaceAll(ex.target.Sandbox, "_", "-")+".guest", strconv.Itoa(int(ex.target.Port)))
	pr.Out.Host = pr.In.Host
	pr.SetXForwarded()
}

// proxyError answers a request the guest could not serve.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	ex, _ := r.Context().Value(exchangeKey{}).(*exchange)
	var dialErr error
	if ex != nil {
		ex.mu.Lock()
		dialErr = ex.dialErr
		ex.mu.Unlock()
	}
	switch {
	case dialErr != nil && errdefs.ClassOf(dialErr) == errdefs.ErrFailedPrecondition:
		p.cfg.WriteError(w, r, http.StatusBadGateway, errdefs.New(errdefs.ErrFailedPrecondition,
			"nothing listens on port %d in sandbox %s", ex.target.Port, ex.target.Sandbox).WithCause(dialErr))
	case dialErr != nil:
		p.cfg.WriteError(w, r, 0, dialErr)
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads an answer.
		p.cfg.WriteError(w, r, 0, errdefs.New(errdefs.ErrCancelled, "request cancelled").WithCause(err))
	default:
		p.cfg.WriteError(w, r, http.StatusBadGateway, errdefs.New(errdefs.ErrUnavailable,
			"the server on port %d of sandbox %s did not answer the request", ex.target.Port, ex.target.Sandbox).WithCause(err))
	}
}

// statusRecorder keeps the status of the answer for the audit log; it
// unwraps for http.ResponseController (flush, hijack for upgrades).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 || s.status < 200 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
