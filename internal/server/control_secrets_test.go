package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/secrets"
	"github.com/space-sandbox/space/internal/store"
	"github.com/space-sandbox/space/internal/store/sqlite"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// staticFleet is a fleet whose placement the test sets: which node each
// sandbox is bound to and where each node is. The resolver reads only
// HostOf and Hosts of it; the e2e cluster suite runs the same resolver
// over placement and a real kube-scheduler.
type staticFleet struct {
	mu    sync.Mutex
	bound map[string]string // sandbox -> node
	nodes map[string]string // node -> worker address
}

func (f *staticFleet) HostOf(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bound[id]
}

func (f *staticFleet) Hosts(context.Context) ([]worker.HostStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []worker.HostStatus
	for n, a := range f.nodes {
		out = append(out, worker.HostStatus{Name: n, Ready: true, Address: a})
	}
	return out, nil
}

// TestWorkerSecrets runs the control plane's ResolveSecret route (the
// real store, secrets service and remote's server and client over a real
// listener) as workers see it: a sandbox's tenant's secret only, to its
// node only, rotated and deleted values taking effect once the cache's
// TTL has passed, and no value in any error or log line.
func TestWorkerSecrets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	key, err := secrets.LoadKey(filepath.Join(t.TempDir(), "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(db, key, log)
	if err != nil {
		t.Fatal(err)
	}
	acme, globex := &store.Tenant{Name: "acme"}, &store.Tenant{Name: "globex"}
	for _, tn := range []*store.Tenant{acme, globex} {
		if err := db.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	sandbox := func(tenant string) string {
		sb := &store.Sandbox{TenantID: tenant, Template: "base", TemplateDigest: "sha256:aa", State: store.SandboxRunning,
			VCPUs: 1, MemoryMiB: 256, DiskMiB: 1024}
		if err := db.Atomic(ctx, func(ctx context.Context, tx store.Store) error { return tx.CreateSandbox(ctx, sb) }); err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	acmeBox, globexBox, elsewhere := sandbox(acme.ID), sandbox(globex.ID), sandbox(acme.ID)
	const (
		acmeV1   = "sk-acme-one-0123456789abcdef"
		acmeV2   = "sk-acme-two-fedcba9876543210"
		globexV1 = "sk-globex-0a1b2c3d4e5f6a7b8c"
	)
	put := func(tenant, name, value string) {
		t.Helper()
		if _, _, err := sec.Put(ctx, tenant, name, value); err != nil {
			t.Fatal(err)
		}
	}
	put(acme.ID, "api", acmeV1)
	put(globex.ID, "api", globexV1)
	put(globex.ID, "only-globex", globexV1)

	fleet := &staticFleet{
		bound: map[string]string{acmeBox: "space-a", globexBox: "space-a", elsewhere: "space-b"},
		nodes: map[string]string{"space-a": "127.0.0.1:7070", "space-b": "10.1.2.3:7070"},
	}
	tokenFile := filepath.Join(t.TempDir(), "worker.token")
	token, _, err := remote.EnsureToken(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	mount, err := mountWorkerSecrets(ControlConfig{WorkerTokenFile: tokenFile}, db, sec, fleet, log)
	if err != nil {
		t.Fatal(err)
	}
	publicAPI := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "public API", http.StatusTeapot) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mount(publicAPI), ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	url := "http://" + ln.Addr().String()

	client := func(node string, ttl time.Duration, tok remote.Token) *remote.ControlClient {
		t.Helper()
		c, err := remote.NewControlClient(remote.ControlClientConfig{URLs: []string{url}, Token: tok, Node: node,
			SecretTTL: ttl, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	var errs []string
	want := func(t *testing.T, c *remote.ControlClient, sandboxID, name, value string, class *errdefs.Class) {
		t.Helper()
		got, err := c.Secret(ctx, sandboxID, name)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if got != value || (class == nil) != (err == nil) || (class != nil && errdefs.ClassOf(err) != class) {
			t.Fatalf("secret %s of %s: got %q, %v; want %q, class %v\nlog:\n%s", name, sandboxID, got, err, value, class, logs.tail(4000))
		}
	}
	nodeA := client("space-a", -1, token) // no cache: every call asks

	t.Run("a sandbox gets its own tenant's secret", func(t *testing.T) {
		want(t, nodeA, acmeBox, "api", acmeV1, nil)
		want(t, nodeA, globexBox, "api", globexV1, nil)
	})
	t.Run("never another tenant's", func(t *testing.T) {
		want(t, nodeA, acmeBox, "only-globex", "", errdefs.ErrNotFound)
	})
	t.Run("only to the node the sandbox is bound to", func(t *testing.T) {
		// space-b's sandbox asked for from space-a's address, and
		// space-a's sandbox asked for by a worker claiming space-b (its
		// call comes from 127.0.0.1, space-b is at 10.1.2.3).
		want(t, nodeA, elsewhere, "api", "", errdefs.ErrNotFound)
		want(t, client("space-b", -1, token), acmeBox, "api", "", errdefs.ErrNotFound)
		want(t, client("space-b", -1, token), elsewhere, "api", "", errdefs.ErrNotFound)
		want(t, nodeA, "sbx_nosuchsandbox", "api", "", errdefs.ErrNotFound)
	})
	t.Run("a wrong token is refused, a tenant's route is not reachable with it", func(t *testing.T) {
		wrong, err := remote.NewToken(strings.Repeat("x", 40))
		if err != nil {
			t.Fatal(err)
		}
		want(t, client("space-a", -1, wrong), acmeBox, "api", "", errdefs.ErrUnauthenticated)
		resp, err := http.Get(url + "/v1/sandboxes")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot {
			t.Fatalf("a public path got %d, want the public API's answer", resp.StatusCode)
		}
	})
	t.Run("rotation and deletion take effect within the TTL", func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		cached := client("space-a", ttl, token)
		want(t, cached, acmeBox, "api", acmeV1, nil)
		put(acme.ID, "api", acmeV2)
		want(t, nodeA, acmeBox, "api", acmeV2, nil) // uncached: at once
		time.Sleep(ttl + 50*time.Millisecond)
		want(t, cached, acmeBox, "api", acmeV2, nil)
		if err := sec.Delete(ctx, acme.ID, "api"); err != nil {
			t.Fatal(err)
		}
		want(t, nodeA, acmeBox, "api", "", errdefs.ErrNotFound)
		time.Sleep(ttl + 50*time.Millisecond)
		want(t, cached, acmeBox, "api", "", errdefs.ErrNotFound)
		want(t, nodeA, globexBox, "api", globexV1, nil) // the other tenant's stays
	})
	t.Run("no value in errors or logs", func(t *testing.T) {
		all := logs.tail(1<<20) + strings.Join(errs, "\n")
		if !strings.Contains(all, "secret not resolved for a worker") {
			t.Fatalf("refusals were not logged:\n%s", all)
		}
		raw, err := os.ReadFile(tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{acmeV1, acmeV2, globexV1, strings.TrimSpace(string(raw))} {
			if strings.Contains(all, v) {
				t.Fatalf("a value is in the errors or logs:\n%s", all)
			}
		}
	})
}
