package e2b

import (
	"context"
	"net"
	"net/http"
	"strconv"

	"github.com/space-sandbox/space/internal/errdefs"
)

// E2B's port traffic: a request with E2b-Sandbox-Id and an E2b-Sandbox-Port
// other than envd's goes to that port inside the guest, through the same
// reverse proxy as SPACE's preview URLs (internal/portproxy), authorised by
// the sandbox's traffic access token (what create and connect return as
// trafficAccessToken) or by its envd access token.

// HeaderTrafficToken carries E2B's trafficAccessToken.
const HeaderTrafficToken = "E2b-Traffic-Access-Token"

// portAccess is the part of create's and connect's answer for the ports.
type portAccess struct {
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
}

// PortTraffic is what port traffic needs of the domain (sandbox.Service);
// the Handler finds it on its Sandboxes by type assertion.
type PortTraffic interface {
	// SandboxTrafficToken is the sandbox's token for every one of its ports.
	SandboxTrafficToken(ctx context.Context, tenant, sandboxID string) (string, error)
	// AuthorizePort checks a token for (sandbox, port) and returns the
	// sandbox's tenant.
	AuthorizePort(ctx context.Context, sandboxID string, port uint16, token string) (tenant string, public bool, err error)
}

// PortProxy serves a request already authorised for (tenant, sandbox,
// port) to that port inside the guest (portproxy's Handler).
type PortProxy interface {
	ServePort(w http.ResponseWriter, r *http.Request, tenant, sandboxID string, port uint16)
}

// portTraffic is the domain's port abilities, or nil when it has none.
func (h *Handler) portTraffic() PortTraffic {
	pt, _ := h.sandboxes.(PortTraffic)
	return pt
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
	pt := h.portTraffic()
	if pt == nil || h.cfg.Ports == nil {
		writeRESTError(w, http.StatusBadGateway, "port traffic is not served here")
		return
	}
	tenant, err := h.authorizePort(r, pt, id, port)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	// The guest's server sees none of E2B's routing or credentials.
	for _, k := range []string{HeaderSandboxID, HeaderSandboxPort, HeaderTrafficToken, HeaderAccessToken} {
		r.Header.Del(k)
	}
	h.cfg.Ports.ServePort(w, r, tenant, id, port)
}

// authorizePort finds the tenant a port request acts for: the traffic
// token's (checked by the domain), else the envd token's.
func (h *Handler) authorizePort(r *http.Request, pt PortTraffic, id string, port uint16) (string, error) {
	if tok := r.Header.Get(HeaderTrafficToken); tok != "" {
		if len(tok) > 256 {
			return "", errorf(http.StatusUnauthorized, "invalid %s", HeaderTrafficToken)
		}
		tenant, _, err := pt.AuthorizePort(r.Context(), id, port, tok)
		if err != nil {
			if errdefs.ClassOf(err) == errdefs.ErrUnauthenticated {
				return "", errorf(http.StatusUnauthorized, "invalid %s", HeaderTrafficToken)
			}
			return "", err
		}
		return tenant, nil
	}
	if r.Header.Get(HeaderAccessToken) != "" {
		call, err := h.authorizeEnvd(r.Context(), r, id)
		if err != nil {
			return "", err
		}
		return call.who.principal.TenantID, nil
	}
	return "", errorf(http.StatusUnauthorized, "port traffic needs %s (the sandbox's trafficAccessToken) or %s", HeaderTrafficToken, HeaderAccessToken)
}

// portFields are create's and connect's trafficAccessToken and domain: the
// sandbox's traffic token, and the preview domain with the port the caller
// reached this server on (so getHost(port) names this listener).
func (h *Handler) portFields(r *http.Request, tenant, id string) (token string, domain *string, err error) {
	pt := h.portTraffic()
	if pt == nil {
		return "", nil, nil
	}
	if token, err = pt.SandboxTrafficToken(r.Context(), tenant, id); err != nil {
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
