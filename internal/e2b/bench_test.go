package e2b_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api"
	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/e2b"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
)

// benchEnv is the E2B front end over a real API server (SQLite store,
// operation engine, the API test worker) with one running sandbox.
type benchEnv struct {
	st        store.Store
	au        *auth.Authenticator
	h         http.Handler
	key       string // a tenant's SPACE key
	otherKey  string // another tenant's
	sandbox   string
	envdToken string
}

func newBenchEnv(b testing.TB) *benchEnv { return newBenchEnvLog(b, nil) }

// newBenchEnvLog is newBenchEnv logging to logw (nil: nowhere).
func newBenchEnvLog(b testing.TB, logw io.Writer) *benchEnv {
	b.Helper()
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "space.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	if logw != nil {
		log = slog.New(slog.NewTextHandler(logw, nil))
	}
	m := api.NewMetrics()
	eng := operation.New(operation.Config{Store: st, Logger: log, Registerer: m.Registry})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		eng.Close(ctx)
	})
	fw := apitest.NewWorker(b)
	apitest.RegisterBaseTemplate(b, st)
	au := auth.New(st, log)
	svc, err := sandbox.New(sandbox.Config{}, sandbox.Deps{Store: st, Ops: eng, Worker: fw, Logger: log, RequestID: api.RequestID})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := api.New(api.Config{}, api.Deps{Service: svc, Store: st, Ops: eng, Auth: au, Logger: log, Metrics: m})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tn := &store.Tenant{ID: store.NewID(store.PrefixTenant), Name: "alice", CreatedAt: time.Now()}
	if err := st.CreateTenant(ctx, tn); err != nil {
		b.Fatal(err)
	}
	key, _, err := au.CreateKey(ctx, tn.ID, false)
	if err != nil {
		b.Fatal(err)
	}
	other := &store.Tenant{ID: store.NewID(store.PrefixTenant), Name: "bob", CreatedAt: time.Now()}
	if err := st.CreateTenant(ctx, other); err != nil {
		b.Fatal(err)
	}
	otherKey, _, err := au.CreateKey(ctx, other.ID, false)
	if err != nil {
		b.Fatal(err)
	}
	e := &benchEnv{st: st, au: au, otherKey: otherKey, h: e2b.New(e2b.Config{}, srv, svc, au, st, log), key: key}
	res := e.do(b, "POST", "/sandboxes", `{"templateID":"base"}`, nil)
	if res.Code != http.StatusCreated {
		b.Fatalf("create: %d %s", res.Code, res.Body)
	}
	var out struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if err := json.Unmarshal(res.Body.Bytes(), &out); err != nil {
		b.Fatal(err)
	}
	e.sandbox, e.envdToken = out.SandboxID, out.EnvdAccessToken
	res = e.do(b, "POST", "/files?path=/tmp/hello.txt&username=root", "hello, bench\n", map[string]string{"Content-Type": "application/octet-stream"})
	if res.Code != http.StatusOK {
		b.Fatalf("upload: %d %s", res.Code, res.Body)
	}
	return e
}

// do serves one request; a path of envd's (/files, /process.…) is sent as
// in-sandbox traffic.
func (e *benchEnv) do(b testing.TB, method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	r := httptest.NewRequest(method, path, rd)
	r.RemoteAddr = "127.0.0.1:1"
	if e.sandbox != "" && (strings.HasPrefix(path, "/files") || strings.HasPrefix(path, "/process.") || strings.HasPrefix(path, "/filesystem.")) {
		r.Header.Set(e2b.HeaderSandboxID, e.sandbox)
		r.Header.Set(e2b.HeaderAccessToken, e.envdToken)
	} else {
		r.Header.Set(e2b.HeaderAPIKey, e.key)
		r.Header.Set("Authorization", "Bearer "+e.key)
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

// TestReadsAsTheKeysTenant: the E2B calls that ask the Service (reads,
// pause, resume, kill and the waits for their operations) answer as the
// key's tenant, as /v1 does: another tenant's sandbox is not found, not
// listed, not paused and not killed, a bad key is 401; the state machine's
// conflicts are the Service's.
func TestReadsAsTheKeysTenant(t *testing.T) {
	e := newBenchEnv(t)
	get := func(key, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set(e2b.HeaderAPIKey, key)
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		return w
	}
	if w := get(e.key, "/sandboxes/"+e.sandbox); w.Code != 200 || !bytes.Contains(w.Body.Bytes(), []byte(`"state":"running"`)) {
		t.Errorf("own sandbox: %d %s", w.Code, w.Body)
	}
	if w := get(e.otherKey, "/sandboxes/"+e.sandbox); w.Code != 404 {
		t.Errorf("another tenant's sandbox: %d %s, want 404", w.Code, w.Body)
	}
	if w := get(e.otherKey, "/v2/sandboxes"); w.Code != 200 || w.Body.String() != "[]\n" {
		t.Errorf("another tenant's list: %d %q, want []", w.Code, w.Body)
	}
	if w := get(e.key, "/v2/sandboxes"); w.Code != 200 || !bytes.Contains(w.Body.Bytes(), []byte(e.sandbox)) {
		t.Errorf("own list: %d %s", w.Code, w.Body)
	}
	if w := get("space_nope", "/sandboxes/"+e.sandbox); w.Code != 401 {
		t.Errorf("bad key: %d %s, want 401", w.Code, w.Body)
	}
	post := func(key, path, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, bytes.NewBufferString(body))
		r.Header.Set(e2b.HeaderAPIKey, key)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		return w
	}
	if w := post(e.otherKey, "/sandboxes/"+e.sandbox+"/pause", ""); w.Code != 404 {
		t.Errorf("pause of another tenant's sandbox: %d %s, want 404", w.Code, w.Body)
	}
	if w := post(e.key, "/sandboxes/"+e.sandbox+"/pause", ""); w.Code != 204 {
		t.Errorf("pause: %d %s, want 204", w.Code, w.Body)
	}
	if w := post(e.key, "/sandboxes/"+e.sandbox+"/pause", ""); w.Code != 409 {
		t.Errorf("pause of a paused sandbox: %d %s, want 409", w.Code, w.Body)
	}
	if w := get(e.key, "/sandboxes/"+e.sandbox); !bytes.Contains(w.Body.Bytes(), []byte(`"state":"paused"`)) {
		t.Errorf("paused sandbox: %d %s", w.Code, w.Body)
	}
	if w := post(e.key, "/sandboxes/"+e.sandbox+"/connect", `{"timeout":60}`); w.Code != 201 {
		t.Errorf("connect (resume): %d %s, want 201", w.Code, w.Body)
	}
	if w := get(e.key, "/sandboxes/"+e.sandbox); !bytes.Contains(w.Body.Bytes(), []byte(`"state":"running"`)) {
		t.Errorf("resumed sandbox: %d %s", w.Code, w.Body)
	}
	kill := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("DELETE", "/sandboxes/"+e.sandbox, nil)
		r.Header.Set(e2b.HeaderAPIKey, key)
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		return w
	}
	if w := kill(e.otherKey); w.Code != 404 {
		t.Errorf("kill of another tenant's sandbox: %d %s, want 404", w.Code, w.Body)
	}
	if w := kill(e.key); w.Code != 204 {
		t.Errorf("kill: %d %s, want 204 once deleted", w.Code, w.Body)
	}
	if w := get(e.key, "/sandboxes/"+e.sandbox); w.Code != 404 {
		t.Errorf("killed sandbox: %d %s, want 404", w.Code, w.Body)
	}
}

// envelope frames one Connect streaming message.
func envelope(msg string) string {
	var hdr [5]byte
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(msg)))
	return string(hdr[:]) + msg
}

// BenchmarkE2B measures E2B calls that create nothing, end to end through
// the E2B front end and the API server, against the API test worker.
func BenchmarkE2B(b *testing.B) {
	e := newBenchEnv(b)
	for _, c := range []struct {
		name, method, path, body string
		hdr                      map[string]string
	}{
		{"GetSandbox", "GET", "/sandboxes/" + e.sandbox, "", nil},
		{"ListSandboxes", "GET", "/v2/sandboxes", "", nil},
		{"EnvdReadFile", "GET", "/files?path=/tmp/hello.txt&username=root", "", nil},
		// The same reads on SPACE's own /v1, for comparison.
		{"V1GetSandbox", "GET", "/v1/sandboxes/" + e.sandbox, "", nil},
		{"V1ListSandboxes", "GET", "/v1/sandboxes", "", nil},
		{"V1ReadFile", "GET", "/v1/sandboxes/" + e.sandbox + "/files?path=/tmp/hello.txt", "", nil},
		{"EnvdProcessStart", "POST", "/process.Process/Start",
			envelope(`{"process":{"cmd":"/bin/true","args":[]}}`), map[string]string{"Content-Type": "application/connect+json"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				res := e.do(b, c.method, c.path, c.body, c.hdr)
				if res.Code != http.StatusOK {
					b.Fatalf("%s %s: %d %s", c.method, c.path, res.Code, res.Body)
				}
			}
		})
	}
}
