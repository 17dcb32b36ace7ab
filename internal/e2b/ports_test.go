package e2b

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
)

// portSandbox is a sandbox id of the form store.NewID makes.
const portSandbox = "sbx_0123456789abcdefghjkmnpqrs"

// portDomain is fakeDomain with ports: one traffic token of portSandbox
// (tenant ten_a); a dial records its target and finds nothing listening,
// which the proxy answers 502, so a 502 says the request was let through.
type portDomain struct {
	fakeDomain
	mu    sync.Mutex
	dials []string
}

func (d *portDomain) AuthorizePort(ctx context.Context, sandboxID string, port uint16, token string) (sandbox.PortGrant, error) {
	if sandboxID != portSandbox {
		return sandbox.PortGrant{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", sandboxID)
	}
	if token != "traffic-token" {
		return sandbox.PortGrant{}, errdefs.New(errdefs.ErrUnauthenticated, "the port token is wrong")
	}
	return sandbox.PortGrant{Tenant: "ten_a", TokenID: "ptk_1"}, nil
}

func (d *portDomain) DialPort(ctx context.Context, tenant, sandboxID string, port uint16) (*sandbox.PortConn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, tenant+" "+sandboxID+" "+strconv.Itoa(int(port)))
	d.mu.Unlock()
	return nil, errdefs.New(errdefs.ErrFailedPrecondition, "nothing listens on port %d", port)
}

func (d *portDomain) RecordPortConnection(ctx context.Context, rec sandbox.PortConnection) {}

func (d *portDomain) SandboxTrafficToken(ctx context.Context, tenant, sandboxID string) (string, error) {
	return "traffic-token", nil
}

// newEnvdTokenStore is a store holding one envd token of sandbox.
func newEnvdTokenStore(t *testing.T, sandboxID, tenant, token string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateEnvdToken(context.Background(), &store.EnvdToken{SandboxID: sandboxID, TenantID: tenant, Hash: auth.HashKey(token)}); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPortTraffic: E2B's header-routed port traffic reaches the proxy only
// with the sandbox's traffic token or its envd token, for the sandbox's
// tenant, and only for a port 1-65535.
func TestPortTraffic(t *testing.T) {
	v1 := &fakeV1{}
	d := &portDomain{}
	st := newEnvdTokenStore(t, portSandbox, "ten_a", "envd-token")
	h := New(Config{PreviewDomain: "localhost"}, v1, d, fakeAuth{}, st, nil)
	for _, c := range []struct {
		name       string
		path       string
		hdr        map[string]string
		wantStatus int
		wantDial   string // the dial the request made ("": none)
		wantV1     string // the /v1 path it reached ("": none)
	}{
		{"header, traffic token", "/", map[string]string{HeaderSandboxID: portSandbox, HeaderSandboxPort: "8080", HeaderTrafficToken: "traffic-token"},
			502, "ten_a " + portSandbox + " 8080", ""},
		{"header, envd token", "/x", map[string]string{HeaderSandboxID: portSandbox, HeaderSandboxPort: "3000", HeaderAccessToken: "envd-token"},
			502, "ten_a " + portSandbox + " 3000", ""},
		{"header, no token", "/", map[string]string{HeaderSandboxID: portSandbox, HeaderSandboxPort: "8080"}, 401, "", ""},
		{"header, wrong traffic token", "/", map[string]string{HeaderSandboxID: portSandbox, HeaderSandboxPort: "8080", HeaderTrafficToken: "nope"}, 401, "", ""},
		{"header, wrong envd token", "/", map[string]string{HeaderSandboxID: portSandbox, HeaderSandboxPort: "8080", HeaderAccessToken: "nope"}, 401, "", ""},
		{"header, unknown sandbox", "/", map[string]string{HeaderSandboxID: "sbx_a", HeaderSandboxPort: "8080", HeaderTrafficToken: "traffic-token"}, 404, "", ""},
		{"header, port 0", "/", map[string]string{HeaderSandboxID: portSandbox, HeaderSandboxPort: "0", HeaderTrafficToken: "traffic-token"}, 400, "", ""},
		{"header, port 65536", "/", map[string]string{HeaderSandboxID: portSandbox, HeaderSandboxPort: "65536", HeaderTrafficToken: "traffic-token"}, 400, "", ""},
		{"header, port 08080", "/", map[string]string{HeaderSandboxID: portSandbox, HeaderSandboxPort: "08080", HeaderTrafficToken: "traffic-token"}, 400, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			d.dials, v1.paths = nil, nil
			r := httptest.NewRequest("GET", c.path, nil)
			for k, v := range c.hdr {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			dial := strings.Join(d.dials, ";")
			v1p := strings.Join(v1.paths, ";")
			if w.Code != c.wantStatus || dial != c.wantDial || v1p != c.wantV1 {
				t.Fatalf("= %d %s, dials %q, /v1 %q; want %d, dial %q, /v1 %q", w.Code, w.Body.String(), dial, v1p, c.wantStatus, c.wantDial, c.wantV1)
			}
		})
	}
}
