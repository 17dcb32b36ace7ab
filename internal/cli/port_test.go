package cli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
)

// TestPortCLI: space port list and space port url against the API with the
// test worker, whose agents run in this process: a server on this host's
// loopback is "in the guest", and the URL the CLI prints reaches it through
// the preview proxy.
func TestPortCLI(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "guest says hi") }),
		ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	guestPort := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	apiURL, key := server(t)
	c, _ := client.New(apiURL, key, nil)
	r := &run{t: t, c: c}
	if r.run("", "sandbox", "create", "--json"); r.code != 0 {
		t.Fatalf("create: %d %s", r.code, r.err)
	}
	var sb apiv1.Sandbox
	if err := json.Unmarshal([]byte(r.out), &sb); err != nil {
		t.Fatal(err)
	}

	if r.run("", "port", "list", sb.ID); r.code != 0 || !strings.HasPrefix(r.out, "PORT") || !strings.Contains(r.out, "\n"+guestPort+" ") {
		t.Errorf("port list: %d %q %s", r.code, r.out, r.err)
	}
	var l apiv1.PortList
	if r.run("", "port", "ls", sb.ID, "--json"); r.code != 0 || json.Unmarshal([]byte(r.out), &l) != nil || len(l.Ports) == 0 {
		t.Errorf("port ls --json: %d %q %s", r.code, r.out, r.err)
	}

	// A private URL: the URL, its token, its expiry; the token opens it.
	if r.run("", "port", "url", sb.ID, guestPort, "--ttl", "90s"); r.code != 0 {
		t.Fatalf("port url: %d %s", r.code, r.err)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "token: ") || !strings.HasPrefix(lines[2], "expires: ") ||
		!strings.Contains(lines[0], guestPort+"-"+sb.ID+".") {
		t.Fatalf("port url printed %q", r.out)
	}
	token := strings.Fields(strings.TrimPrefix(lines[1], "token: "))[0]
	if st, body := getThrough(t, apiURL, lines[0], token); st != 200 || body != "guest says hi" {
		t.Errorf("the private URL with its token: %d %q", st, body)
	}
	if st, _ := getThrough(t, apiURL, lines[0], ""); st != 401 {
		t.Errorf("the private URL without its token: %d, want 401", st)
	}

	// A public URL as JSON: no token, and it expires within the TTL asked.
	if r.run("", "port", "url", sb.ID, guestPort, "--public", "--ttl", "2m", "--json"); r.code != 0 {
		t.Fatalf("port url --public: %d %s", r.code, r.err)
	}
	var u apiv1.PortURL
	if err := json.Unmarshal([]byte(r.out), &u); err != nil || u.Token != "" || !u.Public {
		t.Fatalf("port url --public --json: %q %v", r.out, err)
	}
	if d := time.Until(u.ExpiresAt); d <= time.Minute || d > 2*time.Minute+5*time.Second {
		t.Errorf("--ttl 2m: expires in %v", d)
	}
	if st, body := getThrough(t, apiURL, u.URL, ""); st != 200 || body != "guest says hi" {
		t.Errorf("the public URL: %d %q", st, body)
	}

	if r.run("", "port", "url", "sbx_nope", guestPort); r.code != 1 || !strings.Contains(r.err, "not_found") {
		t.Errorf("port url of an unknown sandbox: %d %q", r.code, r.err)
	}
}

// getThrough GETs a preview URL from the API server's address (the URL's
// *.localhost host need not resolve here), with a port token when set.
func getThrough(t *testing.T, apiURL, rawURL, token string) (int, string) {
	t.Helper()
	api, _ := url.Parse(apiURL)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, api.Host)
		}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest("GET", rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set(client.PortTokenHeader, token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
