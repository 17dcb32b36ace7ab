package e2b

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/portproxy"
)

// E2B's port traffic: a request with E2b-Sandbox-Id and an E2b-Sandbox-Port
// other than envd's goes to that port inside the guest, through the same
// reverse proxy as SPACE's preview URLs (internal/portproxy), authorised by
// the sandbox's traffic access token (what create and connect return as
// trafficAccessToken) or by its envd access token. The host form getHost
// builds, {port}-{id}.{domain}, never reaches this package: the server
// sends preview hosts to the proxy before any front end (api.PreviewFirst),
// which takes E2B's traffic token header there too.

// HeaderTrafficToken carries E2B's trafficAccessToken.
const HeaderTrafficToken = portproxy.E2BTokenHeader

// portAccess is the part of create's and connect's answer for the ports.
type portAccess struct {
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
}

// PortTraffic is what port traffic needs of the domain (sandbox.Service,
// found on the Handler's Sandboxes by type assertion): the proxy's calls
// and the sandbox traffic token.
type PortTraffic interface {
	portproxy.Service
	SandboxTrafficToken(ctx context.Context, tenant, sandboxID string) (string, error)
}

// newPortProxy is the port proxy of E2B's traffic, answering errors in
// E2B's shape; nil when the domain has no ports.
func (h *Handler) newPortProxy() *portproxy.Proxy {
	pt, ok := h.sandboxes.(PortTraffic)
	if !ok {
		return nil
	}
	h.traffic = pt
	return portproxy.New(portproxy.Config{
		Service: pt, Domain: h.cfg.PreviewDomain, Logger: h.log,
		// Only Forward is used: this edge authorises the requests itself.
		AuthenticateKey: func(context.Context, string) (string, string, error) {
			return "", "", errdefs.New(errdefs.ErrUnauthenticated, "E2B port traffic is authorised by its tokens")
		},
		WriteError: func(w http.ResponseWriter, r *http.Request, status int, err error) {
			if status == 0 {
				h.writeErr(w, r, err)
				return
			}
			_, msg, _ := errdefs.Render(err)
			writeRESTError(w, status, "%s", msg)
		},
	})
}

// parsePort reads a port header: a decimal 1-65535.
func parsePort(s string) (uint16, bool) {
	if len(s) == 0 || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 16)
	return uint16(n), err == nil && n > 0
}

// servePort forwards one E2B port request to the guest's port.
func (h *Handler) servePort(w http.ResponseWriter, r *http.Request, id, portHeader string) {
	port, ok := parsePort(portHeader)
	if !ok {
		writeRESTError(w, http.StatusBadRequest, "E2b-Sandbox-Port must be a port number from 1 to 65535")
		return
	}
	if h.ports == nil {
		writeRESTError(w, http.StatusBadGateway, "port traffic is not served here")
		return
	}
	target, err := h.authorizePort(r, id, port)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	// The guest's server sees none of E2B's routing or credentials.
	for _, k := range []string{HeaderSandboxID, HeaderSandboxPort, HeaderTrafficToken, HeaderAccessToken} {
		r.Header.Del(k)
	}
	// A proxied exchange lasts as long as its parties keep it going (a
	// WebSocket, a long upload): not the listener's whole-body bound.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	h.ports.Forward(w, r, target)
}

// authorizePort finds whom a port request acts for: the traffic token's
// tenant (checked by the domain), else the envd token's.
func (h *Handler) authorizePort(r *http.Request, id string, port uint16) (portproxy.Target, error) {
	t := portproxy.Target{Sandbox: id, Port: port}
	if tok := r.Header.Get(HeaderTrafficToken); tok != "" {
		if len(tok) > 256 {
			return t, errorf(http.StatusUnauthorized, "invalid %s", HeaderTrafficToken)
		}
		g, err := h.traffic.AuthorizePort(r.Context(), id, port, tok)
		if err != nil {
			if errdefs.ClassOf(err) == errdefs.ErrUnauthenticated {
				return t, errorf(http.StatusUnauthorized, "invalid %s", HeaderTrafficToken)
			}
			return t, err
		}
		t.Tenant, t.Via = g.Tenant, "token:"+g.TokenID
		return t, nil
	}
	if r.Header.Get(HeaderAccessToken) != "" {
		call, err := h.authorizeEnvd(r.Context(), r, id)
		if err != nil {
			return t, err
		}
		t.Tenant, t.Via = call.who.principal.TenantID, "envd:"+id
		return t, nil
	}
	return t, errorf(http.StatusUnauthorized, "port traffic needs %s (the sandbox's trafficAccessToken) or %s", HeaderTrafficToken, HeaderAccessToken)
}

// portFields are create's and connect's trafficAccessToken and domain: a
// traffic token of the sandbox, and the preview domain with the port the
// caller reached this listener on (so getHost(port) names this listener,
// as the preview URLs do).
func (h *Handler) portFields(r *http.Request, tenant, id string) (token string, domain *string, err error) {
	if h.traffic == nil {
		return "", nil, nil
	}
	if token, err = h.traffic.SandboxTrafficToken(r.Context(), tenant, id); err != nil {
		return "", nil, err
	}
	if h.cfg.PreviewDomain == "" {
		return token, nil, nil
	}
	d := h.cfg.PreviewDomain
	if _, p, err := net.SplitHostPort(r.Host); err == nil && p != "" && p != "80" && p != "443" {
		d = net.JoinHostPort(d, p)
	}
	return token, &d, nil
}
