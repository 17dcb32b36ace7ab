package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/version"
)

// TestNetworkSecretsKeysCLI drives the commands over the network, secrets,
// key format, admin listing, workers and version routes against the API with the fake
// worker.
func TestNetworkSecretsKeysCLI(t *testing.T) {
	url, key := server(t)
	c, _ := client.New(url, key, nil)
	r := &run{t: t, c: c}
	if r.run("", "sandbox", "create", "--json"); r.code != 0 {
		t.Fatalf("create: %d %s", r.code, r.err)
	}
	var sb apiv1.Sandbox
	if err := json.Unmarshal([]byte(r.out), &sb); err != nil {
		t.Fatal(err)
	}

	// The network policy, from flags and from a file.
	if r.run("", "sandbox", "network", "set", sb.ID, "--allow", "pypi.org", "--allow", "203.0.113.0/24", "--deny", "evil.example",
		"--inject", "api.example.com:Authorization=Bearer ${secret:tok}", "--json"); r.code != 0 {
		t.Fatalf("network set: %d %s", r.code, r.err)
	}
	var got struct {
		Network struct {
			Egress struct {
				Default     string
				Allow, Deny []string
			}
			Inject []struct{ Domain, Header, Value string }
		}
	}
	if err := json.Unmarshal([]byte(r.out), &got); err != nil {
		t.Fatal(err)
	}
	n := got.Network
	if n.Egress.Default != "deny" || strings.Join(n.Egress.Allow, ",") != "pypi.org,203.0.113.0/24" || strings.Join(n.Egress.Deny, ",") != "evil.example" ||
		len(n.Inject) != 1 || n.Inject[0].Domain != "api.example.com" || n.Inject[0].Header != "Authorization" || n.Inject[0].Value != "Bearer ${secret:tok}" {
		t.Errorf("policy set from flags: %+v", n)
	}
	pf := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(pf, []byte(`{"egress":{"default":"allow"}}`), 0o644)
	if r.run("", "sandbox", "network", "set", sb.ID, "--file", pf); r.code != 0 || !strings.Contains(r.out, `"default":"allow"`) {
		t.Errorf("network set --file: %d %q %s", r.code, r.out, r.err)
	}
	if r.run(`{"egress":{"default":"sometimes"}}`, "sandbox", "network", "set", sb.ID, "--file", "-"); r.code != 1 || !strings.Contains(r.err, "invalid_argument") {
		t.Errorf("network set of a bad policy: %d %q", r.code, r.err)
	}
	if r.run("", "sandbox", "network", "set", sb.ID, "--file", pf, "--allow", "x.example"); r.code != 2 {
		t.Errorf("--file with --allow: %d %q", r.code, r.err)
	}
	if r.run("", "sandbox", "network", "set", sb.ID, "--inject", "no-header"); r.code != 2 || !strings.Contains(r.err, "DOMAIN:HEADER=VALUE") {
		t.Errorf("--inject without a header: %d %q", r.code, r.err)
	}

	// Secrets: the value from stdin or a file, never shown again.
	if r.run("s3cr3t-value\n", "secret", "set", "tok"); r.code != 0 || strings.TrimSpace(r.out) != "tok" {
		t.Fatalf("secret set: %d %q %s", r.code, r.out, r.err)
	}
	vf := filepath.Join(t.TempDir(), "v")
	os.WriteFile(vf, []byte("other"), 0o600)
	if r.run("", "secret", "put", "other", "--from-file", vf); r.code != 0 {
		t.Fatalf("secret put --from-file: %d %s", r.code, r.err)
	}
	if r.run("", "secret", "list"); r.code != 0 || !strings.Contains(r.out, "tok") || !strings.Contains(r.out, "other") || strings.Contains(r.out, "s3cr3t") {
		t.Errorf("secret list: %d %q", r.code, r.out)
	}
	if r.run("", "secret", "delete", "other"); r.code != 0 {
		t.Errorf("secret delete: %d %s", r.code, r.err)
	}
	if r.run("", "secret", "list", "--json"); r.code != 0 || strings.Contains(r.out, `"other"`) || !strings.Contains(r.out, `"tok"`) {
		t.Errorf("secret list after delete: %q", r.out)
	}

	// Keys in E2B's format.
	if r.run("", "admin", "tenant", "create", "e2bteam"); r.code != 0 {
		t.Fatalf("tenant create: %s", r.err)
	}
	if r.run("", "admin", "key", "create", "e2bteam", "--format", "e2b"); r.code != 0 || !strings.HasPrefix(r.out, "e2b_") {
		t.Fatalf("key create --format e2b: %d %q %s", r.code, r.out, r.err)
	}
	e2bClient, _ := client.New(url, strings.TrimSpace(r.out), nil)
	if _, err := e2bClient.ListSandboxes(t.Context(), client.SandboxFilter{}); err != nil {
		t.Errorf("the e2b-format key does not work: %v", err)
	}

	e2bKey := strings.TrimSpace(r.out)

	// The admin listings: tenants, keys (never the key itself), quotas.
	if r.run("", "admin", "tenant", "list"); r.code != 0 || !strings.Contains(r.out, "QUOTA SANDBOXES") ||
		!strings.Contains(r.out, "e2bteam") || !regexp.MustCompile(`(?m)^admin +ten_\S+ +1 +unlimited`).MatchString(r.out) {
		t.Errorf("admin tenant list: %d %q %s", r.code, r.out, r.err)
	}
	if r.run("", "admin", "key", "list", "e2bteam", "--json"); r.code != 0 || strings.Contains(r.out, e2bKey) ||
		!strings.Contains(r.out, `"format": "e2b"`) {
		t.Errorf("admin key list --json: %d %q %s", r.code, r.out, r.err)
	}
	if r.run("", "admin", "key", "ls", "e2bteam"); r.code != 0 || strings.Contains(r.out, e2bKey) ||
		!regexp.MustCompile(`(?m)^key_\S+ +e2b +false +\S+ +-$`).MatchString(r.out) {
		t.Errorf("admin key ls: %d %q %s", r.code, r.out, r.err)
	}
	if r.run("", "admin", "key", "list", "nobody"); r.code != 1 || !strings.Contains(r.err, "not_found") {
		t.Errorf("admin key list of an unknown tenant: %d %q", r.code, r.err)
	}
	if r.run("", "admin", "tenant", "quota", "e2bteam", "--sandboxes", "2", "--memory-mib", "2048"); r.code != 0 ||
		strings.TrimSpace(r.out) != "e2bteam: sandboxes 2, vcpus unlimited, memory 2048MiB" {
		t.Errorf("admin tenant quota: %d %q %s", r.code, r.out, r.err)
	}
	if r.run("", "admin", "tenant", "quota", "e2bteam", "--vcpus", "4", "--json"); r.code != 0 ||
		!strings.Contains(r.out, `"sandboxes": 2`) || !strings.Contains(r.out, `"vcpus": 4`) {
		t.Errorf("admin tenant quota --json: %d %q %s", r.code, r.out, r.err)
	}

	if r.run("", "admin", "workers"); r.code != 0 || !strings.Contains(r.out, "NAME") || !strings.Contains(r.out, "ready") {
		t.Errorf("admin workers: %d %q %s", r.code, r.out, r.err)
	}

	// The client's and the server's versions.
	if r.run("", "version"); r.code != 0 || strings.Count(r.out, version.Get().String()) != 2 ||
		!strings.Contains(r.out, "client: ") || !strings.Contains(r.out, "server: ") {
		t.Errorf("version: %d %q %s", r.code, r.out, r.err)
	}
	if r.run("", "version", "--json"); r.code != 0 || !strings.Contains(r.out, `"server"`) || !strings.Contains(r.out, `"go_version"`) {
		t.Errorf("version --json: %d %q", r.code, r.out)
	}
}
