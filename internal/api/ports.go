package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/portproxy"
	"github.com/space-sandbox/space/internal/sandbox"
)

// Ports: the listing, preview URLs, the audit log, the path form of the
// proxy, and Host-based preview routing in front of the mux. The proxy
// itself is internal/portproxy; what a token opens is sandbox.Service's.

// newPortProxy builds the proxy the preview hosts and the path form use.
func (s *Server) newPortProxy() *portproxy.Proxy {
	return portproxy.New(portproxy.Config{
		Service: s.svc,
		Domain:  s.cfg.Preview.Name,
		AuthenticateKey: func(ctx context.Context, key string) (string, string, error) {
			p, err := s.auth.Authenticate(ctx, key)
			return p.TenantID, p.KeyID, err
		},
		WriteError: func(w http.ResponseWriter, r *http.Request, status int, err error) {
			if status != 0 {
				w = withStatus{w, status}
			}
			s.writeError(w, r, err)
		},
		Logger: s.logger,
	})
}

// previewRouting sends requests whose Host is under the preview domain to
// the port proxy and the rest to next (the API).
func (s *Server) previewRouting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.ports.Owns(r) {
			next.ServeHTTP(w, r)
			return
		}
		// The guest's answers are its own: no API route rewrites them.
		r.Pattern = "preview"
		s.proxyBody(w, r)
		s.ports.ServeHTTP(w, r)
	})
}

// PreviewFirst sends requests whose Host is under the preview domain to
// the API's own handler (which proxies them to the guest) before next sees
// them: the front ends mounted around the API (the E2B API by path or
// header, the control plane's internal routes) never take a guest's
// request.
func (s *Server) PreviewFirst(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.ports.Owns(r) {
			s.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// proxyBody lets a proxied request's body take as long as it keeps
// arriving (an upload), and a bodyless one (an upgrade, a stream) hold its
// connection without the API's read deadline.
func (s *Server) proxyBody(w http.ResponseWriter, r *http.Request) {
	if b, ok := r.Body.(*boundedBody); ok {
		b.idle = s.cfg.UploadIdleTimeout
		_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// pathPort is the {port} of the route: 1-65535.
func pathPort(r *http.Request) (uint16, error) {
	s := r.PathValue("port")
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 || strings.HasPrefix(s, "0") {
		return 0, invalid(map[string]string{"port": "must be 1-65535"})
	}
	return uint16(p), nil
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	ports, err := s.svc.ListPorts(r.Context(), sb.TenantID, sb.ID)
	if err != nil {
		return err
	}
	out := apiv1.PortList{Ports: make([]apiv1.ListeningPort, 0, len(ports))}
	for _, p := range ports {
		out.Ports = append(out.Ports, apiv1.ListeningPort{Port: int(p.Port), Address: p.Address, Protocol: "tcp"})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createPortURL(w http.ResponseWriter, r *http.Request) error {
	port, err := pathPort(r)
	if err != nil {
		return err
	}
	var req apiv1.CreatePortURLRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if req.TTLSeconds < 0 || time.Duration(req.TTLSeconds) > sandbox.MaxPortURLTTL/time.Second {
		return invalid(map[string]string{"ttl_seconds": "must be 1-604800 (default 3600)"})
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	rec, token, err := s.svc.CreatePortURL(r.Context(), sb.TenantID, sb.ID, port, req.Public, time.Duration(req.TTLSeconds)*time.Second)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, apiv1.PortURL{URL: s.cfg.Preview.URL(sb.ID, port, r.Host), Port: int(port), Public: rec.Public,
		Token: token, ExpiresAt: rec.ExpiresAt.UTC()})
	return nil
}

func (s *Server) portLog(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	recs, err := s.svc.PortConnections(r.Context(), sb.TenantID, sb.ID)
	if err != nil {
		return err
	}
	out := apiv1.PortLog{Records: make([]apiv1.PortConnection, 0, len(recs))}
	for _, c := range recs {
		out.Records = append(out.Records, apiv1.PortConnection{Port: int(c.Port), Via: c.Via, Remote: c.Remote,
			Started: c.Started, Ended: c.Ended, Status: c.Status, BytesIn: c.BytesIn, BytesOut: c.BytesOut})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// proxyPort is the path form: /v1/sandboxes/{id}/ports/{port}/proxy/{path…}
// reaches the port with the owner's API key, as /{path…}.
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request) error {
	port, err := pathPort(r)
	if err != nil {
		return err
	}
	sb, err := s.sandbox(r)
	if err != nil {
		return err
	}
	p := principal(r.Context())
	r.Header.Del("Authorization")
	r.Header.Del(portproxy.TokenHeader)
	// The guest gets the rest of the path as the client encoded it.
	prefix := "/v1/sandboxes/" + sb.ID + "/ports/" + r.PathValue("port") + "/proxy"
	rest := strings.TrimPrefix(r.URL.EscapedPath(), prefix)
	if !strings.HasPrefix(rest, "/") {
		rest = "/" + rest
	}
	r.URL.Path, r.URL.RawPath = "/"+r.PathValue("path"), rest
	s.proxyBody(w, r)
	s.ports.Forward(w, r, portproxy.Target{Tenant: p.TenantID, Sandbox: sb.ID, Port: port, Via: "key:" + p.KeyID})
	return nil
}
