package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestE2BSDK drives the E2B-compatible API with the official e2b npm
// package at 2.51.0 and at 2.50.0 (e2e/e2b-sdk, installed by make
// setup-test from its lockfile) against a real spaced.
func TestE2BSDK(t *testing.T) {
	node := nodeBinary(t)
	if out, err := exec.Command(node, "-e", `const [a,b,c]=process.versions.node.split('.').map(Number);process.exit(a>20||(a===20&&(b>18||(b===18&&c>=1)))?0:1)`).CombinedOutput(); err != nil {
		t.Fatalf("the e2b SDK needs node ≥ 20.18.1 (make setup-test links one in e2e/node-runtime/bin): %s: %v %s", node, err, out)
	}
	dir, err := filepath.Abs("e2b-sdk")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"e2b-new", "e2b-old"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("the e2b SDK is not installed: run make setup-test (npm ci in e2e/e2b-sdk): %v", err)
		}
	}
	srv := startServer(t)
	// The newer SDK runs with a SPACE key, the older one with an e2b-format
	// key (the form E2B's Python SDK insists on).
	keys := map[string]string{"new": newTenantKey(t, srv, "e2b-sdk"), "old": newE2BKey(t, srv, "e2b-sdk-old")}
	other := newTenantKey(t, srv, "e2b-other")
	for _, which := range []string{"new", "old"} {
		key := keys[which]
		t.Run("sdk-"+which, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "client.mjs")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "E2B_SDK="+which, "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL,
				"E2B_API_KEY="+key, "OTHER_API_KEY="+other)
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			t.Logf("node client.mjs (%s):\n%s", which, out)
			if err != nil {
				t.Fatalf("the e2b SDK client failed: %v", err)
			}
			if !strings.Contains(string(out), "ok: all checks passed") {
				t.Fatal("the e2b SDK client did not finish its checks")
			}
		})
	}
}

// newE2BKey makes a tenant and an e2b-format key for it.
func newE2BKey(t *testing.T, srv *server, name string) string {
	t.Helper()
	admin := srv.client(srv.AdminKey)
	admin.mustDo("POST", "/v1/admin/tenants", map[string]string{"name": name}, nil, 201)
	var key struct {
		Key string `json:"key"`
	}
	admin.mustDo("POST", "/v1/admin/tenants/"+name+"/keys", map[string]any{"format": "e2b"}, &key, 201)
	if !regexp.MustCompile(`^e2b_[0-9a-f]+$`).MatchString(key.Key) {
		t.Fatalf("e2b-format key = %q", key.Key)
	}
	return key.Key
}
