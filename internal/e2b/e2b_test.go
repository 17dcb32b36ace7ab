package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
)

func TestIsREST(t *testing.T) {
	for _, c := range []struct {
		path string
		want bool
	}{
		{"/sandboxes", true}, {"/sandboxes/sbx_1/pause", true}, {"/v2/sandboxes", true},
		{"/v2/sandboxes/sbx_1/connect", true}, {"/v3/templates", true}, {"/health", true},
		{"/volumes/x", true}, {"/v1/sandboxes", false}, {"/healthz", false}, {"/openapi.json", false},
		{"/metrics", false}, {"/sandboxesX", false}, {"/v2/v1", false}, {"/", false},
	} {
		if got := isREST(c.path); got != c.want {
			t.Errorf("isREST(%q) = %v, want %v", c.path, got, c.want)
		}
	}
}

// fakeV1 stands for SPACE's /v1 handler: it records what reached it and
// records what reaches it: only requests that are not E2B's do (E2B's
// calls ask the domain, fakeDomain).
type fakeV1 struct {
	paths []string
}

func (f *fakeV1) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.paths = append(f.paths, r.Method+" "+r.URL.Path)
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/sandboxes/"):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"sandbox not found"}}`)
	default:
		w.WriteHeader(299)
	}
}

// fakeDomain stands for sandbox.Service: sandbox sbx_a of tenant ten_a,
// suspended. It records the filter of the last listing and answers a file
// read with the sandbox's tenant and the path in the body. What it does
// not implement panics (Sandboxes is nil).
type fakeDomain struct {
	Sandboxes
	filter store.SandboxFilter
}

func (d *fakeDomain) ReadFile(ctx context.Context, sb *store.Sandbox, p string) (io.ReadCloser, agentproto.FileInfo, error) {
	return io.NopCloser(strings.NewReader("tenant=" + sb.TenantID + " path=" + p)), agentproto.FileInfo{}, nil
}

var sandboxA = store.Sandbox{ID: "sbx_a", TenantID: "ten_a", Template: "base", State: store.SandboxSuspended,
	VCPUs: 1, MemoryMiB: 256, DiskMiB: 1024, Metadata: map[string]string{"a": "1"},
	CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}

func (d *fakeDomain) GetSandbox(ctx context.Context, tenant, id string) (*store.Sandbox, error) {
	if id != sandboxA.ID || (tenant != sandboxA.TenantID && tenant != store.AnyTenant) {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
	}
	sb := sandboxA
	return &sb, nil
}

func (d *fakeDomain) ListSandboxes(ctx context.Context, f store.SandboxFilter) (store.Page[*store.Sandbox], error) {
	d.filter = f
	sb := sandboxA
	return store.Page[*store.Sandbox]{Items: []*store.Sandbox{&sb}, NextPageToken: "tok2"}, nil
}

func (d *fakeDomain) WorkerOf(sb *store.Sandbox) string { return sb.Worker }

func (d *fakeDomain) SubmitDelete(ctx context.Context, tenant, id string) (*store.Operation, error) {
	return nil, errdefs.New(errdefs.ErrUnavailable, "not in this fake")
}

func (d *fakeDomain) Suspend(ctx context.Context, sb *store.Sandbox) (*store.Operation, error) {
	return nil, errdefs.New(errdefs.ErrUnavailable, "not in this fake")
}

func (d *fakeDomain) Wake(ctx context.Context, sb *store.Sandbox) (*store.Operation, error) {
	return nil, errdefs.New(errdefs.ErrUnavailable, "not in this fake")
}

func (d *fakeDomain) WaitOperation(ctx context.Context, tenant, id string, wait time.Duration) (*store.Operation, error) {
	return nil, errdefs.New(errdefs.ErrUnavailable, "not in this fake")
}

// fakeAuth knows one key, space_k, of tenant ten_a.
type fakeAuth struct{}

func (fakeAuth) Authenticate(ctx context.Context, token string) (auth.Principal, error) {
	if token != "space_k" {
		return auth.Principal{}, errdefs.New(errdefs.ErrUnauthenticated, "missing or invalid API key")
	}
	return auth.Principal{TenantID: "ten_a", KeyID: "key_k"}, nil
}

func newTestHandler(t *testing.T) (*Handler, *fakeV1, string) {
	h, v1, _, tok := newTestHandlerDomain(t)
	return h, v1, tok
}

func newTestHandlerDomain(t *testing.T) (*Handler, *fakeV1, *fakeDomain, string) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tok := "secret-token"
	if err := st.CreateEnvdToken(context.Background(), &store.EnvdToken{SandboxID: "sbx_a", TenantID: "ten_a", Hash: auth.HashKey(tok)}); err != nil {
		t.Fatal(err)
	}
	v1 := &fakeV1{}
	d := &fakeDomain{}
	return New(Config{}, v1, d, fakeAuth{}, st, nil), v1, d, tok
}

func TestRouting(t *testing.T) {
	h, v1, tok := newTestHandler(t)
	for _, c := range []struct {
		name       string
		method     string
		path       string
		hdr        map[string]string
		wantStatus int
		wantBody   string // substring
	}{
		{"v1 passes through", "GET", "/v1/features", nil, 299, ""},
		{"healthz passes through", "GET", "/healthz", nil, 299, ""},
		{"rest health", "GET", "/health", nil, 200, `"ok"`},
		{"rest without key", "GET", "/sandboxes/sbx_a", nil, 401, `"code":401`},
		{"rest unknown sandbox", "GET", "/sandboxes/sbx_x", map[string]string{"X-API-KEY": "space_k"}, 404, `{"code":404,"message":"sandbox \"sbx_x\" not found"}`},
		{"rest bad key", "GET", "/sandboxes/sbx_a", map[string]string{"X-API-KEY": "space_nope"}, 401, `{"code":401,"message":"missing or invalid API key"}`},
		{"rest sandbox", "GET", "/sandboxes/sbx_a", map[string]string{"X-API-KEY": "space_k"}, 200, `"state":"paused"`},
		{"rest unsupported", "GET", "/sandboxes/sbx_a/metrics", map[string]string{"X-API-KEY": "space_k"}, 501, `"code":501`},
		{"envd other port", "GET", "/", map[string]string{HeaderSandboxID: "sbx_a", HeaderSandboxPort: "8080"}, 502, `"code":502`},
		{"envd health of unknown sandbox", "GET", "/health", map[string]string{HeaderSandboxID: "sbx_a", HeaderSandboxPort: EnvdPort}, 502, ""},
		{"envd without token", "GET", "/files?path=/x", map[string]string{HeaderSandboxID: "sbx_a"}, 401, `"code":401`},
		{"envd wrong token", "GET", "/files?path=/x", map[string]string{HeaderSandboxID: "sbx_a", HeaderAccessToken: "nope"}, 401, ""},
		{"envd token of another sandbox", "GET", "/files?path=/x", map[string]string{HeaderSandboxID: "sbx_b", HeaderAccessToken: tok}, 401, ""},
		{"envd files as the tenant", "GET", "/files?path=rel/x", map[string]string{HeaderSandboxID: "sbx_a", HeaderAccessToken: tok}, 200, "tenant=ten_a path=/home/user/rel/x"},
		{"envd rpc without token", "POST", "/process.Process/List", map[string]string{HeaderSandboxID: "sbx_a", "Content-Type": "application/json"}, 401, `"code":"unauthenticated"`},
		{"envd unknown rpc", "POST", "/filesystem.Filesystem/WatchDir", map[string]string{HeaderSandboxID: "sbx_a", HeaderAccessToken: tok, "Content-Type": "application/json"}, 501, `"code":"unimplemented"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, c.path, nil)
			for k, v := range c.hdr {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.wantStatus || !strings.Contains(w.Body.String(), c.wantBody) {
				t.Fatalf("%s %s = %d %s, want %d with %q", c.method, c.path, w.Code, w.Body.String(), c.wantStatus, c.wantBody)
			}
		})
	}
	if want := []string{"GET /v1/features", "GET /healthz"}; !reflect.DeepEqual(v1.paths, want) {
		t.Errorf("/v1 handler got %q, want only the pass-throughs %q", v1.paths, want)
	}
}

func TestStreamErrorBeforeAuth(t *testing.T) {
	h, _, _ := newTestHandler(t)
	r := httptest.NewRequest("POST", "/process.Process/Start", bytes.NewReader(envelope(0, []byte(`{}`))))
	r.Header.Set(HeaderSandboxID, "sbx_a")
	r.Header.Set("Content-Type", "application/connect+json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d type %q", w.Code, w.Header().Get("Content-Type"))
	}
	flags, msg, err := readEnvelope(w.Body)
	if err != nil || flags != flagEndStream {
		t.Fatalf("frame flags %x err %v", flags, err)
	}
	var end struct{ Error rpcError }
	if err := json.Unmarshal(msg, &end); err != nil || end.Error.Code != "unauthenticated" {
		t.Fatalf("end %s: %v", msg, err)
	}
}

func TestCreateRefusals(t *testing.T) {
	h, v1, _ := newTestHandler(t)
	h.cfg.RefuseInternet = true
	for _, c := range []struct {
		body       string
		wantStatus int
	}{
		{`{"templateID":"base","allow_internet_access":true}`, 403},
		{`{"templateID":"base","autoPause":true}`, 501},
		{`{"templateID":`, 400},
	} {
		r := httptest.NewRequest("POST", "/v2/sandboxes", strings.NewReader(c.body))
		r.Header.Set("X-API-KEY", "space_k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var body restError
		if w.Code != c.wantStatus || json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Code != c.wantStatus || body.Message == "" {
			t.Errorf("%s: %d %s, want %d", c.body, w.Code, w.Body.String(), c.wantStatus)
		}
	}
	if len(v1.paths) != 0 {
		t.Fatalf("a refused create reached /v1: %v", v1.paths)
	}
}

func TestListTranslation(t *testing.T) {
	h, _, d, _ := newTestHandlerDomain(t)
	for _, c := range []struct {
		path, wantState string
		want            store.SandboxFilter // but for its states
	}{
		{"/v2/sandboxes?metadata=" + url.QueryEscape("a=1&b=2") + "&state=paused&limit=5&nextToken=t1",
			"paused,suspending,suspended,failed",
			store.SandboxFilter{Metadata: map[string]string{"a": "1", "b": "2"}, PageRequest: store.PageRequest{PageSize: 5, PageToken: "t1"}}},
		{"/v2/sandboxes?state=running&state=paused", "creating,running,pausing,waking,paused,suspending,suspended,failed", store.SandboxFilter{}},
		{"/v2/sandboxes", "creating,running,pausing,waking,paused,suspending,suspended,failed", store.SandboxFilter{}},
		{"/sandboxes", "creating,running,pausing,waking", store.SandboxFilter{}},
		{"/sandboxes?limit=5000", "creating,running,pausing,waking", store.SandboxFilter{PageRequest: store.PageRequest{PageSize: store.MaxPageSize}}},
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		r.Header.Set("X-API-KEY", "space_k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 || w.Header().Get("X-Next-Token") != "tok2" {
			t.Fatalf("%s: %d %q %s", c.path, w.Code, w.Header().Get("X-Next-Token"), w.Body.String())
		}
		var states []string
		for _, st := range d.filter.States {
			states = append(states, string(st))
		}
		if got := strings.Join(states, ","); got != c.wantState {
			t.Errorf("%s: state %q, want %q", c.path, got, c.wantState)
		}
		c.want.TenantID, c.want.States = "ten_a", d.filter.States
		if !reflect.DeepEqual(d.filter, c.want) {
			t.Errorf("%s: filter %+v, want %+v", c.path, d.filter, c.want)
		}
		var items []map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &items); err != nil || len(items) != 1 {
			t.Fatalf("%s: body %s", c.path, w.Body.String())
		}
		it := items[0]
		if it["sandboxID"] != "sbx_a" || it["state"] != "paused" || it["templateID"] != "base" || it["cpuCount"] != 1.0 ||
			it["memoryMB"] != 256.0 || it["envdVersion"] != EnvdVersion || it["startedAt"] != "2026-01-02T03:04:05Z" {
			t.Fatalf("%s: item %v", c.path, it)
		}
	}
	r := httptest.NewRequest("GET", "/v2/sandboxes?state=sleeping", nil)
	r.Header.Set("X-API-KEY", "space_k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"code":400`) {
		t.Fatalf("unknown state: %d %s", w.Code, w.Body.String())
	}
}
