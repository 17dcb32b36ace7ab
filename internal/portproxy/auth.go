package portproxy

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
)

// What carries a port token: a header (scripts), a query parameter (a
// link opened in a browser, once), then a cookie of the preview host.
const (
	TokenHeader = "X-Space-Port-Token"
	TokenQuery  = "space_token"
	TokenCookie = "space_token"
	// E2BTokenHeader carries E2B's trafficAccessToken (a sandbox traffic
	// token) on the same preview hosts, as E2B's SDKs send it.
	E2BTokenHeader = "E2b-Traffic-Access-Token"
)

// ServeHTTP serves a request whose Host is a preview host: 400 when the
// host does not parse, then who may pass, then Forward. Requests whose
// Host is not under the preview domain are not the proxy's (Owns).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	port, sandboxID, ok, err := ParseHost(r.Host, p.cfg.Domain)
	if !ok {
		p.cfg.WriteError(w, r, 0, errdefs.New(errdefs.ErrNotFound, "not a preview host"))
		return
	}
	if err != nil {
		p.cfg.WriteError(w, r, 0, err)
		return
	}
	t, done := p.authorize(w, r, sandboxID, port)
	if done {
		return
	}
	p.Forward(w, r, t)
}

// Owns says whether r's Host is under the preview domain, so its request
// is the proxy's (whether or not it parses).
func (p *Proxy) Owns(r *http.Request) bool {
	_, _, ok, _ := ParseHost(r.Host, p.cfg.Domain)
	return ok
}

// authorize decides who r is for port of sandboxID, strips what proved
// it from r, and answers the request itself (done) when it must not be
// forwarded: an error, or the redirect that turns ?space_token= into a
// cookie.
func (p *Proxy) authorize(w http.ResponseWriter, r *http.Request, sandboxID string, port uint16) (t Target, done bool) {
	t = Target{Sandbox: sandboxID, Port: port}
	q := r.URL.Query()
	fromQuery := q.Get(TokenQuery)
	token := r.Header.Get(TokenHeader)
	if token == "" {
		token = r.Header.Get(E2BTokenHeader)
	}
	if token == "" {
		token = fromQuery
	}
	if token == "" {
		if c, err := r.Cookie(TokenCookie); err == nil {
			token = c.Value
		}
	}
	bearer, hasBearer := auth.TokenFromHeader(r.Header.Get("Authorization"))
	stripAuth(r)

	if token == "" && hasBearer && isKey(bearer) {
		tenant, keyID, err := p.cfg.AuthenticateKey(r.Context(), bearer)
		if err != nil {
			p.cfg.WriteError(w, r, 0, err)
			return t, true
		}
		t.Tenant, t.Via = tenant, "key:"+keyID
		return t, false
	}
	g, err := p.cfg.Service.AuthorizePort(r.Context(), sandboxID, port, token)
	if err != nil {
		if errdefs.ClassOf(err) == errdefs.ErrUnauthenticated {
			w.Header().Set("WWW-Authenticate", `Bearer realm="space-port"`)
		}
		p.cfg.WriteError(w, r, 0, err)
		return t, true
	}
	t.Tenant, t.Via = g.Tenant, via(g)
	if fromQuery != "" && token == fromQuery && !g.Public {
		setTokenCookie(w, r, fromQuery, g)
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			http.Redirect(w, r, withoutToken(r.URL), http.StatusFound)
			return t, true
		}
	}
	return t, false
}

// isKey says whether a bearer token has the form of one of the API's
// keys (whichever tenant's, valid or not): such a header is never
// forwarded to a guest.
func isKey(token string) bool {
	return strings.HasPrefix(token, auth.KeyPrefix) || strings.HasPrefix(token, auth.E2BKeyPrefix)
}

func via(g sandbox.PortGrant) string {
	if g.Public {
		return "public:" + g.TokenID
	}
	return "token:" + g.TokenID
}

// stripAuth removes SPACE's own credentials from r so that no guest ever
// sees them: the port token header, the token's query parameter and
// cookie, and an Authorization header carrying an API key (a guest app's
// own Authorization passes).
func stripAuth(r *http.Request) {
	r.Header.Del(TokenHeader)
	r.Header.Del(E2BTokenHeader)
	if b, ok := auth.TokenFromHeader(r.Header.Get("Authorization")); ok && isKey(b) {
		r.Header.Del("Authorization")
	}
	if q := r.URL.Query(); q.Has(TokenQuery) {
		q.Del(TokenQuery)
		r.URL.RawQuery = q.Encode()
	}
	if cookies := r.Cookies(); len(cookies) > 0 {
		r.Header.Del("Cookie")
		var kept []string
		for _, c := range cookies {
			if c.Name != TokenCookie {
				kept = append(kept, c.Name+"="+c.Value)
			}
		}
		if len(kept) > 0 {
			r.Header.Set("Cookie", strings.Join(kept, "; "))
		}
	}
}

// setTokenCookie keeps token for the preview host (no Domain attribute:
// that host only), HttpOnly, Secure over TLS, until the grant expires.
func setTokenCookie(w http.ResponseWriter, r *http.Request, token string, g sandbox.PortGrant) {
	c := &http.Cookie{Name: TokenCookie, Value: token, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode}
	if g.ExpiresAt != nil {
		c.MaxAge = max(1, int(time.Until(*g.ExpiresAt).Seconds()))
	}
	http.SetCookie(w, c)
}

// withoutToken is u as a redirect target: its path and query, the token
// parameter removed (stripAuth did).
func withoutToken(u *url.URL) string {
	v := url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}
	if !strings.HasPrefix(v.Path, "/") || strings.HasPrefix(v.Path, "//") || strings.HasPrefix(v.Path, "/\\") {
		// Never "//host/…", which a browser reads as another host.
		v.Path, v.RawPath = "/"+strings.TrimLeft(v.Path, "/\\"), ""
	}
	return v.String()
}
