package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/sandbox"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
)

// env is one API server over a real SQLite store, operation engine and
// authenticator, with the fake worker.
type env struct {
	t      testing.TB
	srv    *Server
	http   *httptest.Server
	store  store.Store
	ops    *operation.Engine
	worker *apitest.Worker
	// keys of the tenants "admin" (admin key), "alice" and "bob".
	adminKey, aliceKey, bobKey string
	alice, bob                 *client.Client
	admin                      *client.Client
}

func newEnv(t testing.TB, cfg Config) *env { return newEnvWith(t, cfg, nil) }

// newEnvWith is newEnv with with (when set) changing the Service's deps
// first.
func newEnvWith(t testing.TB, cfg Config, with func(*sandbox.Deps)) *env {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m := NewMetrics()
	eng := operation.New(operation.Config{Store: st, Logger: log, Registerer: m.Registry})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		eng.Close(ctx)
	})
	au := auth.New(st, log)
	fw := apitest.NewWorker(t)
	apitest.RegisterBaseTemplate(t, st)
	sdeps := sandbox.Deps{Store: st, Ops: eng, Worker: fw, Logger: log, RequestID: RequestID}
	if with != nil {
		with(&sdeps)
	}
	svc, err := sandbox.New(sandbox.Config{}, sdeps)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Deps{Service: svc, Store: st, Ops: eng, Auth: au, Logger: log, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	e := &env{t: t, srv: srv, http: hs, store: st, ops: eng, worker: fw}
	ctx := context.Background()
	mkTenant := func(name string, admin bool, q store.Quota) string {
		tn := &store.Tenant{ID: store.NewID(store.PrefixTenant), Name: name, Quota: q, CreatedAt: time.Now()}
		if err := st.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
		key, _, err := au.CreateKey(ctx, tn.ID, admin)
		if err != nil {
			t.Fatal(err)
		}
		return key
	}
	e.adminKey = mkTenant("admin", true, store.Quota{})
	e.aliceKey = mkTenant("alice", false, store.Quota{MaxSandboxes: 3})
	e.bobKey = mkTenant("bob", false, store.Quota{})
	e.admin = e.client(e.adminKey)
	e.alice = e.client(e.aliceKey)
	e.bob = e.client(e.bobKey)
	return e
}

func (e *env) client(key string) *client.Client {
	c, err := client.New(e.http.URL, key, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// do sends a raw request and returns status, headers and body.
func (e *env) do(method, path, key string, body []byte, hdr ...string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil && len(hdr) == 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// wantError checks an error answer's status and code and returns its body.
func wantError(t *testing.T, status int, body []byte, wantStatus int, wantCode string) apiv1.Error {
	t.Helper()
	var eb apiv1.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	if status != wantStatus || eb.Error.Code != wantCode {
		t.Fatalf("got %d %s (%q), want %d %s", status, eb.Error.Code, eb.Error.Message, wantStatus, wantCode)
	}
	return eb.Error
}

// running creates a sandbox for c and waits until it runs.
func (e *env) running(c *client.Client, metadata map[string]string) apiv1.Sandbox {
	e.t.Helper()
	ctx := context.Background()
	res, err := c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "base", Metadata: metadata})
	if err != nil {
		e.t.Fatal(err)
	}
	op, err := c.WaitOperation(ctx, res.Operation.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	if op.State != apiv1.OpSucceeded {
		e.t.Fatalf("create operation %s: %+v", op.State, op.Error)
	}
	sb, err := c.GetSandbox(ctx, res.Sandbox.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	if sb.State != apiv1.SandboxRunning {
		e.t.Fatalf("sandbox state %s", sb.State)
	}
	return *sb
}
