package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

func TestOpenAPIMatchesRoutes(t *testing.T) {
	e := newEnv(t, Config{})
	registered := map[string]bool{}
	for _, rt := range e.srv.routes {
		registered[rt.pattern] = true
		if _, ok := docs[rt.pattern]; !ok {
			t.Errorf("route %q is not in the OpenAPI document", rt.pattern)
		}
	}
	for p := range docs {
		if !registered[p] {
			t.Errorf("OpenAPI document names %q, which is not a route", p)
		}
	}
	// The served document lists exactly the registered (method, path) pairs.
	status, _, body := e.do("GET", "/openapi.json", "", nil)
	if status != 200 {
		t.Fatalf("openapi.json: %d", status)
	}
	var d struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	if d.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q", d.OpenAPI)
	}
	var served []string
	for p, methods := range d.Paths {
		for m := range methods {
			served = append(served, strings.ToUpper(m)+" "+p)
		}
	}
	var want []string
	for p := range registered {
		want = append(want, strings.ReplaceAll(p, "...}", "}")) // a {name...} wildcard is the path parameter {name}
	}
	sort.Strings(served)
	sort.Strings(want)
	if strings.Join(served, "\n") != strings.Join(want, "\n") {
		t.Errorf("served paths:\n%s\nwant:\n%s", strings.Join(served, "\n"), strings.Join(want, "\n"))
	}
	// Every $ref points at a defined schema.
	var full map[string]any
	json.Unmarshal(body, &full)
	schemas := full["components"].(map[string]any)["schemas"].(map[string]any)
	for _, ref := range findRefs(full) {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		if _, ok := schemas[name]; !ok {
			t.Errorf("dangling $ref %q", ref)
		}
	}
}

func findRefs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			if s, ok := vv.(string); ok && k == "$ref" {
				out = append(out, s)
			}
			out = append(out, findRefs(vv)...)
		}
	case []any:
		for _, vv := range x {
			out = append(out, findRefs(vv)...)
		}
	}
	return out
}

func TestAuth(t *testing.T) {
	e := newEnv(t, Config{})
	tests := []struct {
		name, method, path, key string
		status                  int
		code                    string
	}{
		{"no key", "GET", "/v1/sandboxes", "", 401, "unauthenticated"},
		{"bad key", "GET", "/v1/sandboxes", "space_nope", 401, "unauthenticated"},
		{"tenant on admin route", "GET", "/v1/admin/workers", e.aliceKey, 403, "permission_denied"},
		{"tenant creates tenant", "POST", "/v1/admin/tenants", e.aliceKey, 403, "permission_denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, hdr, body := e.do(tt.method, tt.path, tt.key, nil)
			wantError(t, status, body, tt.status, tt.code)
			if hdr.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
		})
	}
	if status, _, _ := e.do("GET", "/v1/admin/workers", e.adminKey, nil); status != 200 {
		t.Errorf("admin workers: %d", status)
	}
	for _, p := range []string{"/healthz", "/openapi.json", "/metrics"} {
		if status, _, _ := e.do("GET", p, "", nil); status != 200 {
			t.Errorf("%s without a key: %d", p, status)
		}
	}
}

func TestRequestID(t *testing.T) {
	e := newEnv(t, Config{})
	_, hdr, _ := e.do("GET", "/healthz", "", nil, "X-Request-Id", "my-id-1")
	if got := hdr.Get("X-Request-Id"); got != "my-id-1" {
		t.Errorf("echoed request id %q", got)
	}
	_, hdr, _ = e.do("GET", "/healthz", "", nil, "X-Request-Id", "bad id\twith spaces")
	if got := hdr.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
		t.Errorf("generated request id %q", got)
	}
}

func TestReadyz(t *testing.T) {
	e := newEnv(t, Config{})
	if status, _, _ := e.do("GET", "/readyz", "", nil); status != 200 {
		t.Errorf("readyz: %d", status)
	}
	e.worker.NotReady = errors.New("no kernel at /secret/host/path")
	status, _, body := e.do("GET", "/readyz", "", nil)
	if status != 503 || strings.Contains(string(body), "/secret") {
		t.Errorf("readyz not ready: %d %s", status, body)
	}
}

func TestStrictJSON(t *testing.T) {
	e := newEnv(t, Config{})
	tests := []struct {
		name, body, field string
	}{
		{"unknown field", `{"template":"base","bogus":1}`, "bogus"},
		{"wrong type", `{"template":"base","vcpus":"two"}`, "vcpus"},
		{"two objects", `{"template":"base"}{"template":"base"}`, "body"},
		{"malformed", `{"template":`, "body"},
		{"empty", ``, "body"},
		{"missing template", `{}`, "template"},
		{"bad metadata key", `{"template":"base","metadata":{"bad key!":"x"}}`, "metadata.bad key!"},
		{"too many vcpus", `{"template":"base","vcpus":99}`, "vcpus"},
		{"bad network policy", `{"template":"base","network":{"egress":{"default":"maybe"}}}`, "network.egress.default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := e.do("POST", "/v1/sandboxes", e.aliceKey, []byte(tt.body))
			er := wantError(t, status, body, 400, "invalid_argument")
			fields, _ := er.Details["fields"].(map[string]any)
			if _, ok := fields[tt.field]; !ok {
				t.Errorf("details.fields %v lacks %q", er.Details, tt.field)
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	e := newEnv(t, Config{MaxJSONBytes: 64})
	big := `{"template":"base","metadata":{"k":"` + strings.Repeat("x", 200) + `"}}`
	status, _, body := e.do("POST", "/v1/sandboxes", e.aliceKey, []byte(big))
	wantError(t, status, body, 413, "payload_too_large")
}

func TestPanicRecovery(t *testing.T) {
	e := newEnv(t, Config{})
	h := e.srv.base(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic("boom /host/path") }))
	rec := newRecorder()
	h.ServeHTTP(rec, mustRequest(t, "GET", "/x"))
	wantError(t, rec.status, rec.body.Bytes(), 500, "internal")
	if strings.Contains(rec.body.String(), "boom") {
		t.Errorf("panic value leaked: %s", rec.body.String())
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{errdefs.ErrNotFound, 404, "not_found", "not found"},
		{errors.New("disk /var/lib/x failed"), 500, "internal", "internal error"},
		{errdefs.New(errdefs.ErrConflict, "sandbox is paused").WithCause(errors.New("/secret")), 409, "conflict", "sandbox is paused"},
		{errdefs.ErrResourceExhausted, 429, "resource_exhausted", "resource exhausted"},
		{errdefs.ErrFailedPrecondition, 412, "failed_precondition", "precondition failed"},
		{errdefs.ErrUnavailable, 503, "unavailable", "service unavailable, retry later"},
	}
	for _, tt := range tests {
		status, info := errorInfo(tt.err)
		if status != tt.status || info.Code != tt.code || info.Message != tt.msg {
			t.Errorf("%v: got %d %s %q", tt.err, status, info.Code, info.Message)
		}
	}
}

func TestFeatures(t *testing.T) {
	if _, err := New(Config{Features: []string{"nope"}}, Deps{}); err == nil {
		t.Error("New accepted missing deps")
	}
	e := newEnv(t, Config{Features: []string{"egress_https_inject"}})
	fl, err := e.alice.Features(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(fl.Features) == 0 || !fl.Features[0].Enabled {
		t.Errorf("features: %+v", fl.Features)
	}
	if _, err := featureSet([]string{"nope"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("unknown gate: %v", err)
	}
}

// A body declared too large, within oversizeDrainBytes, is read before the
// 413 goes out: the connection stays open for the next request, so a client
// still writing its body reads the answer, never a reset. Past the bound the
// 413 comes at once and the connection closes.
func TestOversizeBodyAnsweredOnOpenConnection(t *testing.T) {
	e := newEnv(t, Config{MaxUploadBytes: 1 << 16})
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(conn)
	put := func(size int) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("PUT", e.http.URL+"/v1/sandboxes/sbx_none/files?path=/big", bytes.NewReader(make([]byte, size)))
		req.Header.Set("Authorization", "Bearer "+e.aliceKey)
		req.Header.Set("Content-Type", "application/octet-stream")
		if err := req.Write(conn); err != nil {
			t.Fatalf("write %d-byte request: %v", size, err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("read answer to a %d-byte body: %v", size, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantError(t, resp.StatusCode, body, 413, "payload_too_large")
		return resp
	}
	if resp := put(1 << 17); resp.Close {
		t.Fatal("a 128 KiB body over the limit closed the connection; it should be read and the connection kept")
	}
	// Past the bound: only the header is sent, so an answer at all shows the
	// server did not wait for the body.
	fmt.Fprintf(conn, "PUT /v1/sandboxes/sbx_none/files?path=/big HTTP/1.1\r\nHost: space\r\n"+
		"Authorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n",
		e.aliceKey, oversizeDrainBytes+1)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read answer to a body past oversizeDrainBytes: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	wantError(t, resp.StatusCode, body, 413, "payload_too_large")
	if !resp.Close {
		t.Error("a body past oversizeDrainBytes left the connection open; it should close after the 413")
	}
}
