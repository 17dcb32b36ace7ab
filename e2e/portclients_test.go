package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// The port clients against a real spaced and real VMs: the E2B SDK's port
// routing, the CLI's space port, the MCP tools and the Python SDK's
// sb.ports, each reaching busybox httpd inside a sandbox through the proxy.

const portPage = "hello from port 8080\n"

// startHTTPD serves portPage on port 8080 of the sandbox (busybox httpd,
// which daemonizes) and waits until the guest lists the port.
func startHTTPD(t *testing.T, c *client, id string) {
	t.Helper()
	var res apiv1.ExecResponse
	c.mustDo("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"sh", "-c",
		"mkdir -p /root/www && printf 'hello from port 8080\\n' > /root/www/index.html && busybox httpd -p 8080 -h /root/www"}}, &res, 200)
	if res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("start httpd: %+v", res)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var l apiv1.PortList
		c.mustDo("GET", "/v1/sandboxes/"+id+"/ports", nil, &l, 200)
		for _, p := range l.Ports {
			if p.Port == 8080 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("httpd never listened on 8080: %+v", l)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// previewGet GETs a preview URL by sending it to the server's own address
// with the URL's host as Host (a *.localhost name need not resolve here).
func previewGet(t *testing.T, srv *server, rawURL string, hdr map[string]string) (int, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("preview URL %q: %v", rawURL, err)
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	hc := &http.Client{
		Timeout: time.Minute,
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest("GET", rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u.Host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// TestPortsE2BSDK runs e2e/e2b-sdk/ports.mjs with the official e2b SDK
// 2.51.0: trafficAccessToken, domain, getHost and both ways E2B routes port
// traffic.
func TestPortsE2BSDK(t *testing.T) {
	node := nodeBinary(t)
	dir, err := filepath.Abs("e2b-sdk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b-new", "package.json")); err != nil {
		t.Fatalf("the e2b SDK is not installed: run make setup-test (npm ci in e2e/e2b-sdk): %v", err)
	}
	srv := startServer(t)
	key := newTenantKey(t, srv, "ports-e2b")
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "ports.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL, "E2B_API_KEY="+key,
		"SPACE_ADDR="+addr, "EXPECT_DOMAIN=localhost:"+port)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("node ports.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the e2b SDK port checks failed: %v", err)
	}
	if !strings.Contains(string(out), "ok: all checks passed") {
		t.Fatal("the e2b SDK port checks did not finish")
	}
}

// TestPortsClients: the CLI, the MCP server and the Python SDK each list a
// sandbox's ports and make preview URLs that reach httpd in it.
func TestPortsClients(t *testing.T) {
	srv := startServer(t)
	key := newTenantKey(t, srv, "ports-clients")
	c := srv.client(key)
	sbx := c.createSandbox(map[string]any{"template": "base"})
	startHTTPD(t, c, sbx.ID)

	t.Run("cli", func(t *testing.T) {
		space := func(args ...string) (string, int) {
			cmd := exec.Command(filepath.Join(binDir, "space"), args...)
			cmd.Env = append(os.Environ(), "SPACE_URL="+srv.URL, "SPACE_API_KEY="+key)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return stdout.String() + stderr.String(), ee.ExitCode()
			}
			if err != nil {
				t.Fatalf("space %v: %v", args, err)
			}
			return stdout.String(), 0
		}
		out, code := space("port", "list", sbx.ID)
		if code != 0 || !strings.Contains(out, "PORT") || !strings.Contains(out, "8080") {
			t.Errorf("space port list: exit %d, %q", code, out)
		}
		out, code = space("port", "url", sbx.ID, "8080", "--ttl", "10m")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "token: ") {
			t.Fatalf("space port url: exit %d, %q", code, out)
		}
		token := strings.Fields(strings.TrimPrefix(lines[1], "token: "))[0]
		if st, body := previewGet(t, srv, lines[0], map[string]string{"X-Space-Port-Token": token}); st != 200 || body != portPage {
			t.Errorf("GET the CLI's private URL with its token: %d %q", st, body)
		}
		if st, _ := previewGet(t, srv, lines[0], nil); st != 401 {
			t.Errorf("GET the CLI's private URL without its token: %d, want 401", st)
		}
		out, code = space("port", "url", sbx.ID, "8080", "--public", "--json")
		var pub apiv1.PortURL
		if code != 0 || json.Unmarshal([]byte(out), &pub) != nil || pub.Token != "" || pub.URL == "" {
			t.Fatalf("space port url --public --json: exit %d, %q", code, out)
		}
		if st, body := previewGet(t, srv, pub.URL, nil); st != 200 || body != portPage {
			t.Errorf("GET the CLI's public URL: %d %q", st, body)
		}
		if out, code = space("port", "url", sbx.ID, "0"); code != 2 {
			t.Errorf("space port url ID 0: exit %d, %q; want 2", code, out)
		}
		if out, code = space("port", "url", "sbx_nope", "8080"); code != 1 || !strings.Contains(out, "not_found") {
			t.Errorf("space port url of an unknown sandbox: exit %d, %q", code, out)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.Command(filepath.Join(binDir, "space"), "mcp")
		cmd.Env = append(os.Environ(), "SPACE_URL="+srv.URL, "SPACE_API_KEY="+key)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "space-e2e", Version: "1"}, nil).Connect(ctx,
			&mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		var ports struct {
			Ports []struct{ Port int } `json:"ports"`
		}
		mustCall(ctx, t, cs, "list_ports", map[string]any{"sandbox_id": sbx.ID}, &ports)
		found := false
		for _, p := range ports.Ports {
			found = found || p.Port == 8080
		}
		if !found {
			t.Errorf("list_ports: %+v, want 8080", ports)
		}
		var u struct {
			URL, Token string
			BrowserURL string `json:"browser_url"`
			Public     bool
		}
		mustCall(ctx, t, cs, "get_preview_url", map[string]any{"sandbox_id": sbx.ID, "port": 8080}, &u)
		if u.Public || u.Token == "" || !strings.Contains(u.BrowserURL, "space_token=") {
			t.Errorf("get_preview_url (private): %+v", u)
		}
		if st, body := previewGet(t, srv, u.URL, map[string]string{"X-Space-Port-Token": u.Token}); st != 200 || body != portPage {
			t.Errorf("GET the tool's private URL with its token: %d %q", st, body)
		}
		u.Token = ""
		mustCall(ctx, t, cs, "get_preview_url", map[string]any{"sandbox_id": sbx.ID, "port": 8080, "public": true}, &u)
		if !u.Public || u.Token != "" {
			t.Errorf("get_preview_url (public): %+v", u)
		}
		if st, body := previewGet(t, srv, u.URL, nil); st != 200 || body != portPage {
			t.Errorf("GET the tool's public URL: %d %q", st, body)
		}
		wantToolError(ctx, t, cs, "get_preview_url", map[string]any{"sandbox_id": sbx.ID, "port": 0}, "port must be 1-65535")
		wantToolError(ctx, t, cs, "get_preview_url", map[string]any{"sandbox_id": "sbx_nope", "port": 8080}, "not_found")
	})

	t.Run("python", func(t *testing.T) {
		if _, err := exec.LookPath("python3"); err != nil {
			t.Fatal("needs python3 (Debian package python3; make setup installs it)")
		}
		sdk, err := filepath.Abs(filepath.Join("..", "sdk", "python"))
		if err != nil {
			t.Fatal(err)
		}
		out, err := runPython(t, 10*time.Minute, sdk, append(os.Environ(), "SPACE_URL="+srv.URL, "SPACE_API_KEY="+key,
			"PYTHONPATH="+sdk, "PYTHONDONTWRITEBYTECODE=1"), "python3", "-m", "unittest", "-v", "tests.test_sdk.PortsTest")
		t.Logf("python3 -m unittest tests.test_sdk.PortsTest:\n%s", out)
		if err != nil || !strings.Contains(out, "\nOK") {
			t.Fatalf("the SDK's port tests failed: %v", err)
		}
	})
	c.deleteSandbox(sbx.ID)
}
