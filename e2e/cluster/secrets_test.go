package cluster

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/network"
	"github.com/space-sandbox/space/internal/testenv"
)

// The upstream of TestEgressSecretsOnWorkers: an HTTP server in a network
// namespace of the test's own (standing in for a host outside), reached
// by name through /etc/hosts, which the workers' egress proxies resolve
// with.
const secretsHost = "secrets.cluster.space.test"

var (
	secretsHostSide = netip.MustParseAddr("198.18.207.1")
	secretsUpstream = netip.MustParseAddr("198.18.207.2")
)

// keySeen is what the upstream got in X-Api-Key, request by request.
type keySeen struct {
	mu   sync.Mutex
	keys []string
}

func (k *keySeen) last() (string, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.keys) == 0 {
		return "", 0
	}
	return k.keys[len(k.keys)-1], len(k.keys)
}

// startSecretsUpstream serves secretsHost on port 80 of a namespace of its
// own; it echoes the header back, a leak path the proxy must scrub.
func startSecretsUpstream(t *testing.T) *keySeen {
	t.Helper()
	ns := testenv.UpstreamNet(t, fmt.Sprintf("cl-sec-%d", os.Getpid()), "csec", secretsHostSide, secretsUpstream)
	var l net.Listener
	if err := network.InNamespace(ns, func() (err error) {
		l, err = net.Listen("tcp4", net.JoinHostPort(secretsUpstream.String(), "80"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	seen := &keySeen{}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.mu.Lock()
		seen.keys = append(seen.keys, r.Header.Get("X-Api-Key"))
		seen.mu.Unlock()
		w.Header().Set("X-Echo", r.Header.Get("X-Api-Key"))
		fmt.Fprintf(w, "upstream saw: %s\n", r.Header.Get("X-Api-Key"))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	testenv.AddHosts(t, map[string]netip.Addr{secretsHost: secretsUpstream})
	return seen
}

// tenantAPI makes tenant name through replica a and returns a client of
// the same replica with the tenant's own key.
func tenantAPI(t *testing.T, a *api, name string) *api {
	t.Helper()
	if code := a.do("POST", "/v1/admin/tenants", map[string]string{"name": name}, nil); code != http.StatusCreated && code != http.StatusConflict {
		t.Fatalf("create tenant %s: HTTP %d", name, code)
	}
	var key struct {
		Key string `json:"key"`
	}
	if code := a.do("POST", "/v1/admin/tenants/"+name+"/keys", map[string]string{}, &key); code >= 300 || key.Key == "" {
		t.Fatalf("key of tenant %s: HTTP %d", name, code)
	}
	return &api{t: t, url: a.url, key: key.Key}
}

// TestEgressSecretsOnWorkers: a policy's ${secret:NAME} resolves on a
// cluster worker through the control plane, the tenant's own value only;
// a value rotated through the API is injected on the next requests, a
// deleted one stops being injected; the guest sees none of them.
func TestEgressSecretsOnWorkers(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			logWorkerLines(t, "sbx_", 80)
		}
	})
	seen := startSecretsUpstream(t)
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1_000_000)
	owner := tenantAPI(t, replica(t, 0), "sec-owner-"+suffix)
	other := tenantAPI(t, replica(t, 1), "sec-other-"+suffix)
	const (
		v1      = "sk-cluster-one-7f3a9c0e51b2d4"
		v2      = "sk-cluster-two-0c81e6d2f9a357"
		otherV1 = "sk-other-tenant-5e2b7d91ac04f8"
	)
	put := func(a *api, value string) {
		t.Helper()
		if code := a.do("PUT", "/v1/secrets/upstream-key", map[string]string{"value": value}, nil); code != http.StatusOK && code != http.StatusCreated {
			t.Fatalf("PUT secret: HTTP %d", code)
		}
	}
	put(owner, v1)
	put(other, otherV1) // the same name in another tenant: never the owner's
	policy := map[string]any{
		"egress": map[string]any{"default": "deny", "allow": []string{secretsHost}},
		"inject": []map[string]string{{"domain": secretsHost, "header": "X-Api-Key", "value": "Bearer ${secret:upstream-key}"}},
	}
	sb := owner.create(map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256, "network": policy})
	t.Logf("sandbox %s on worker %s", sb.ID, sb.Worker)
	// The other replica serves the guest calls: any replica serves any.
	reader := &api{t: t, url: replica(t, 1).url, key: owner.key}

	fetch := func() string {
		t.Helper()
		out, _ := reader.tryExec(sb.ID, "timeout 20 wget -q -S -O - http://"+secretsHost+"/ 2>&1; echo rc=$?")
		for _, v := range []string{v1, v2, otherV1} {
			if strings.Contains(out, v) {
				t.Fatalf("a secret's value reached the guest: %q", out)
			}
		}
		return out
	}
	waitKey := func(want string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, func() error {
			out := fetch()
			got, n := seen.last()
			if n == 0 || got != want || !strings.Contains(out, "rc=0") {
				return fmt.Errorf("upstream's last key %q (of %d requests), guest saw %q", redact(got), n, out)
			}
			return nil
		})
	}
	t.Run("injected on the worker, the tenant's own value", func(t *testing.T) {
		waitKey("Bearer " + v1)
	})
	t.Run("a rotated value is injected", func(t *testing.T) {
		put(owner, v2)
		waitKey("Bearer " + v2)
	})
	t.Run("a deleted secret is no longer injected", func(t *testing.T) {
		if code := owner.do("DELETE", "/v1/secrets/upstream-key", nil, nil); code != http.StatusNoContent && code != http.StatusOK {
			t.Fatalf("DELETE secret: HTTP %d", code)
		}
		testenv.Eventually(t, 60*time.Second, func() error {
			_, before := seen.last()
			out := fetch()
			_, after := seen.last()
			if after != before || strings.Contains(out, "rc=0") {
				return fmt.Errorf("the request still went out (%d -> %d requests upstream): %q", before, after, out)
			}
			return nil
		})
	})
	t.Run("no value in the cluster's logs", func(t *testing.T) {
		logs, err := filepath.Glob(filepath.Join(cl.Info.Dir, "logs", "*.log"))
		if err != nil || len(logs) == 0 {
			t.Fatalf("no logs under %s (%v)", cl.Info.Dir, err)
		}
		for _, path := range logs {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{v1, v2, otherV1} {
				if bytes.Contains(b, []byte(v)) {
					t.Fatalf("%s holds a secret's value", path)
				}
			}
		}
	})
}

// logWorkerLines logs the last n lines of the workers' logs that hold
// match, for a failed case's report.
func logWorkerLines(t *testing.T, match string, n int) {
	for _, w := range cl.Info.Workers {
		b, err := os.ReadFile(w.Log)
		if err != nil {
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, match) && !strings.Contains(l, "e2ewarm") {
				if len(l) > 600 {
					l = l[:600]
				}
				lines = append(lines, l)
			}
		}
		lines = lines[max(0, len(lines)-n):]
		t.Logf("%s:\n%s", w.Name, strings.Join(lines, "\n"))
	}
}

// redact shortens a key for a failure message (the test's own values only).
func redact(s string) string {
	if len(s) > 18 {
		return s[:18] + "…"
	}
	return s
}
