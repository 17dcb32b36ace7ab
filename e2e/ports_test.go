package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/space-sandbox/space/internal/api/apiv1"
	spaceclient "github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/testenv"
)

// TestPorts reaches servers inside a real VM through preview hosts on
// spaced's listener: the guest test server (internal/testenv/portserver)
// on loopback in a sandbox whose egress is denied, and busybox httpd.
func TestPorts(t *testing.T) {
	srv := startServer(t)
	c := srv.client(srv.AdminKey)
	sb := c.createSandbox(nil)
	sc, err := spaceclient.New(srv.URL, srv.AdminKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartPortServer(t, sc, sb.ID, "127.0.0.1:8080")
	u, _ := url.Parse(srv.URL)
	listen := u.Host
	_, listenPort, _ := net.SplitHostPort(listen)
	previewURL := func(port int, path string) string {
		return fmt.Sprintf("http://%d-%s.localhost:%s%s", port, sb.ID, listenPort, path)
	}
	// Every preview host resolves to the listener (what *.localhost does).
	hc := &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, listen)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       2 * time.Minute,
	}
	get := func(method, u string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, u, body)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	wantCode := func(st int, b []byte, status int, code string) {
		t.Helper()
		var eb apiv1.ErrorBody
		if st != status || json.Unmarshal(b, &eb) != nil || eb.Error.Code != code {
			t.Fatalf("got %d %s, want %d %s", st, b, status, code)
		}
	}

	// The listing sees the server.
	var ports apiv1.PortList
	c.mustDo("GET", "/v1/sandboxes/"+sb.ID+"/ports", nil, &ports, 200)
	found := false
	for _, p := range ports.Ports {
		found = found || p.Port == 8080 && p.Address == "127.0.0.1"
	}
	if !found {
		t.Fatalf("8080 not listed: %+v", ports)
	}

	var private apiv1.PortURL
	c.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/ports/8080/urls", map[string]any{}, &private, 201)
	if private.URL != previewURL(8080, "/") || private.Token == "" {
		t.Fatalf("URL %+v", private)
	}
	t.Run("PrivateURL", func(t *testing.T) {
		st, _, b := get("GET", previewURL(8080, "/"), nil)
		wantCode(st, b, 401, "unauthenticated")
		st, _, b = get("GET", previewURL(8080, "/"), nil, "X-Space-Port-Token", private.Token)
		if st != 200 || string(b) != "portserver\n" {
			t.Fatalf("with token: %d %q", st, b)
		}
	})
	t.Run("CookieFlow", func(t *testing.T) {
		st, hdr, _ := get("GET", previewURL(8080, "/headers?space_token="+url.QueryEscape(private.Token)), nil)
		if st != 302 || hdr.Get("Location") != "/headers" {
			t.Fatalf("redirect: %d %q", st, hdr.Get("Location"))
		}
		cookie := strings.Split(hdr.Get("Set-Cookie"), ";")[0]
		st, _, b := get("GET", previewURL(8080, "/headers"), nil, "Cookie", cookie)
		if st != 200 || strings.Contains(string(b), private.Token) {
			t.Fatalf("with the cookie: %d %s", st, b)
		}
	})
	t.Run("PublicURL", func(t *testing.T) {
		var pub apiv1.PortURL
		c.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/ports/8080/urls", map[string]any{"public": true, "ttl_seconds": 600}, &pub, 201)
		st, _, b := get("GET", previewURL(8080, "/"), nil)
		if st != 200 || string(b) != "portserver\n" {
			t.Fatalf("public: %d %q", st, b)
		}
	})
	t.Run("ClosedPort", func(t *testing.T) {
		st, _, b := get("GET", previewURL(9, "/"), nil, "Authorization", "Bearer "+srv.AdminKey)
		wantCode(st, b, 502, "failed_precondition")
	})
	t.Run("Upload5MiB", func(t *testing.T) {
		body := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16)
		sum := sha256.Sum256(body)
		st, _, b := get("POST", previewURL(8080, "/upload"), bytes.NewReader(body), "X-Space-Port-Token", private.Token)
		var got struct {
			Bytes  int    `json:"bytes"`
			SHA256 string `json:"sha256"`
		}
		if st != 200 || json.Unmarshal(b, &got) != nil || got.Bytes != len(body) || got.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("upload: %d %s", st, b)
		}
	})
	t.Run("SSEFlows", func(t *testing.T) {
		// The guest holds its second line until told: the first must come
		// through before that, which a buffering proxy would not let it.
		req, _ := http.NewRequest("GET", previewURL(8080, "/sse?count=3&hold=e2e"), nil)
		req.Header.Set("X-Space-Port-Token", private.Token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if first, err := br.ReadString('\n'); err != nil || first != "data: 0\n" {
			t.Fatalf("first line %q %v", first, err)
		}
		if st, _, b := get("GET", previewURL(8080, "/release?name=e2e"), nil, "X-Space-Port-Token", private.Token); st != 200 {
			t.Fatalf("release: %d %s", st, b)
		}
		rest, _ := io.ReadAll(br)
		if !strings.Contains(string(rest), "data: 2") {
			t.Fatalf("rest %q", rest)
		}
	})
	t.Run("WebSocketEcho", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, strings.Replace(previewURL(8080, "/ws"), "http", "ws", 1),
			&websocket.DialOptions{HTTPClient: hc, HTTPHeader: http.Header{"X-Space-Port-Token": {private.Token}}})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		ws.SetReadLimit(1 << 20)
		for _, msg := range []string{"hello", strings.Repeat("y", 64<<10)} {
			if err := ws.Write(ctx, websocket.MessageBinary, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_, got, err := ws.Read(ctx)
			if err != nil || string(got) != msg {
				t.Fatalf("echo %d bytes: got %d, %v", len(msg), len(got), err)
			}
		}
		ws.Close(websocket.StatusNormalClosure, "")
	})
	t.Run("AuditLog", func(t *testing.T) {
		var log apiv1.PortLog
		c.mustDo("GET", "/v1/sandboxes/"+sb.ID+"/ports/log", nil, &log, 200)
		var upload, upgrade bool
		for _, r := range log.Records {
			upload = upload || r.Status == 200 && r.BytesOut > 5<<20
			upgrade = upgrade || r.Status == 101
		}
		if !upload || !upgrade {
			t.Fatalf("log %+v", log.Records)
		}
	})
}
