package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agent"
	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/operation"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
	"github.com/space-sandbox/space/internal/worker"
)

// fakeWorker is a hand-made worker.Worker: instead of a VM each sandbox gets
// a real space-agent in test mode, in this process, serving a temp dir as
// its filesystem over a unix socket.
type fakeWorker struct {
	t     *testing.T
	mu    sync.Mutex
	vms   map[string]*fakeVM
	exits chan worker.Exit
	// createErr, when set, makes CreateSandbox fail.
	createErr error
	// gate, when set, blocks CreateSandbox until closed.
	gate     chan struct{}
	notReady error
	deleted  []string
}

type fakeVM struct {
	id     string
	root   string
	client *agentclient.Client
	cancel context.CancelFunc
}

func newFakeWorker(t *testing.T) *fakeWorker {
	return &fakeWorker{t: t, vms: map[string]*fakeVM{}, exits: make(chan worker.Exit, 8)}
}

func (w *fakeWorker) Ready(ctx context.Context) error { return w.notReady }

func (w *fakeWorker) CreateSandbox(ctx context.Context, spec worker.SandboxSpec) (worker.SandboxStatus, error) {
	w.mu.Lock()
	gate, cerr := w.gate, w.createErr
	w.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return worker.SandboxStatus{}, ctx.Err()
		}
	}
	if cerr != nil {
		return worker.SandboxStatus{}, cerr
	}
	dir, err := os.MkdirTemp("", "space-api-vm-")
	if err != nil {
		return worker.SandboxStatus{}, err
	}
	root := filepath.Join(dir, "root")
	os.Mkdir(root, 0o755)
	actx, cancel := context.WithCancel(context.Background())
	ag := agent.New(agent.Config{FileRoot: root})
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		cancel()
		return worker.SandboxStatus{}, err
	}
	go ag.ServeListener(actx, ln)
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}, nil)
	vm := &fakeVM{id: spec.ID, root: root, client: c, cancel: func() {
		c.Close()
		cancel()
		os.RemoveAll(dir)
	}}
	w.mu.Lock()
	w.vms[spec.ID] = vm
	w.mu.Unlock()
	w.t.Cleanup(vm.cancel)
	return worker.SandboxStatus{ID: spec.ID, State: worker.VMRunning, BootedAt: time.Now()}, nil
}

func (w *fakeWorker) DeleteSandbox(ctx context.Context, id string) error {
	w.mu.Lock()
	vm := w.vms[id]
	delete(w.vms, id)
	w.deleted = append(w.deleted, id)
	w.mu.Unlock()
	if vm != nil {
		vm.cancel()
	}
	return nil
}

func (w *fakeWorker) Sandbox(ctx context.Context, id string) (worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.vms[id]; !ok {
		return worker.SandboxStatus{}, errdefs.ErrNotFound
	}
	return worker.SandboxStatus{ID: id, State: worker.VMRunning}, nil
}

func (w *fakeWorker) Sandboxes(ctx context.Context) ([]worker.SandboxStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []worker.SandboxStatus
	for id := range w.vms {
		out = append(out, worker.SandboxStatus{ID: id, State: worker.VMRunning})
	}
	return out, nil
}

func (w *fakeWorker) Agent(ctx context.Context, id string) (*agentclient.Client, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	vm, ok := w.vms[id]
	if !ok {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %s is not on this worker", id)
	}
	return vm.client, nil
}

func (w *fakeWorker) Exits() <-chan worker.Exit { return w.exits }
func (w *fakeWorker) Close() error             { return nil }

// env is one API server over a real SQLite store, operation engine and
// authenticator, with the fake worker.
type env struct {
	t      *testing.T
	srv    *Server
	http   *httptest.Server
	store  store.Store
	ops    *operation.Engine
	worker *fakeWorker
	// keys of the tenants "admin" (admin key), "alice" and "bob".
	adminKey, aliceKey, bobKey string
	alice, bob                 *client.Client
	admin                      *client.Client
}

func newEnv(t *testing.T, cfg Config) *env {
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
	fw := newFakeWorker(t)
	srv, err := New(cfg, Deps{Store: st, Ops: eng, Auth: au, Worker: fw, Logger: log, Metrics: m})
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
