package api

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
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/portproxy"
	"github.com/space-sandbox/space/internal/testenv"
)

// The port proxy against the API tests' worker: its sandboxes' agents run
// in this process, so a guest port is a port of this host's loopback and
// the bytes cross a real agent link (agentclient ⇄ agent, port.dial).

// guestServer is a server "in the guest" (on loopback) that tells what it
// got: /echo answers the request's method, URI, Host and headers as JSON.
type guestServer struct {
	port     uint16
	requests atomic.Int64
	// sse hands the test a way to let /sse write its last line.
	release chan struct{}
}

func startGuestServer(t *testing.T) *guestServer {
	t.Helper()
	g := &guestServer{release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/echo/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "uri": r.RequestURI, "host": r.Host, "headers": r.Header})
	})
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, "%d %s", n, hex.EncodeToString(h.Sum(nil)))
	})
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		io.WriteString(w, "data: first\n\n")
		rc.Flush()
		select { // the last line waits until the client has read the first
		case <-g.release:
		case <-time.After(30 * time.Second):
		}
		io.WriteString(w, "data: last\n\n")
	})
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.requests.Add(1)
		mux.ServeHTTP(w, r)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	g.port = uint16(ln.Addr().(*net.TCPAddr).Port)
	return g
}

// closedPort is a loopback port nothing listens on (it did a moment ago).
func closedPort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// previewClient sends every request, whatever its URL's host, to the
// API's listener: what DNS for *.localhost does for a browser.
func (e *env) previewClient() *http.Client {
	addr := e.http.Listener.Addr().String()
	return &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       60 * time.Second,
	}
}

// previewURL is the preview URL of port in sandbox on the test listener.
func (e *env) previewURL(sandbox string, port uint16, path string) string {
	return fmt.Sprintf("http://%d-%s.localhost:%d%s", port, sandbox, e.http.Listener.Addr().(*net.TCPAddr).Port, path)
}

func (e *env) preview(method, u string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := e.previewClient().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (e *env) portURL(key, sandbox string, port uint16, body string) apiv1.PortURL {
	e.t.Helper()
	st, _, b := e.do("POST", fmt.Sprintf("/v1/sandboxes/%s/ports/%d/urls", sandbox, port), key, []byte(body))
	if st != http.StatusCreated {
		e.t.Fatalf("create port URL: %d %s", st, b)
	}
	var u apiv1.PortURL
	if err := json.Unmarshal(b, &u); err != nil {
		e.t.Fatal(err)
	}
	return u
}

type echoed struct {
	Method, URI, Host string
	Headers           http.Header
}

// echo is preview's answer from the guest's /echo/ handler.
func (e *env) echo(method, u string, body io.Reader, hdr ...string) echoed {
	e.t.Helper()
	st, _, b := e.preview(method, u, body, hdr...)
	return decodeEcho(e.t, st, b)
}

func decodeEcho(t testing.TB, st int, b []byte) echoed {
	t.Helper()
	var got echoed
	if st != 200 || json.Unmarshal(b, &got) != nil {
		t.Fatalf("echo: %d %s", st, b)
	}
	return got
}

func TestPortProxyAuth(t *testing.T) {
	e := newEnv(t, Config{})
	g := startGuestServer(t)
	sb := e.running(e.alice, nil)
	u := e.portURL(e.aliceKey, sb.ID, g.port, `{}`)
	if u.Token == "" || !strings.HasPrefix(u.Token, "spt_") || u.Public || u.URL != e.previewURL(sb.ID, g.port, "/") {
		t.Fatalf("port URL %+v", u)
	}
	if d := time.Until(u.ExpiresAt); d < 59*time.Minute || d > time.Hour {
		t.Fatalf("expires in %s, want 1h", d)
	}
	echo := e.previewURL(sb.ID, g.port, "/echo/x?a=1")

	// No token: 401 in the API's error shape, and the guest saw nothing.
	before := g.requests.Load()
	st, hdr, b := e.preview("GET", echo, nil)
	wantError(t, st, b, 401, "unauthenticated")
	if hdr.Get("Content-Type") != "application/json" || g.requests.Load() != before {
		t.Fatalf("401 answer: %v, guest requests %d", hdr, g.requests.Load()-before)
	}
	// The header token: through, with the proxy's X-Forwarded-* (not the
	// client's) and the client's Host; the token never reaches the guest.
	got := e.echo("GET", echo, nil, portproxy.TokenHeader, u.Token, "X-Forwarded-For", "6.6.6.6")
	if got.Headers.Get(portproxy.TokenHeader) != "" || got.URI != "/echo/x?a=1" || got.Host != strings.TrimPrefix(strings.Split(echo, "/")[2], "") {
		t.Fatalf("guest got %+v", got)
	}
	if xff := got.Headers.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != "127.0.0.1" ||
		got.Headers.Get("X-Forwarded-Proto") != "http" || got.Headers.Get("X-Forwarded-Host") != got.Host {
		t.Fatalf("forwarded headers %v", got.Headers)
	}
	// A token opens only its own port.
	closed := closedPort(t)
	other := e.previewURL(sb.ID, closed, "/echo/")
	st, _, b = e.preview("GET", other, nil, portproxy.TokenHeader, u.Token)
	wantError(t, st, b, 401, "unauthenticated")
	st, _, b = e.preview("GET", echo, nil, portproxy.TokenHeader, u.Token+"x")
	wantError(t, st, b, 401, "unauthenticated")

	// ?space_token= once: a cookie for that host and a redirect without it.
	st, hdr, _ = e.preview("GET", e.previewURL(sb.ID, g.port, "/echo/p?space_token="+url.QueryEscape(u.Token)+"&b=2"), nil)
	if st != http.StatusFound || hdr.Get("Location") != "/echo/p?b=2" {
		t.Fatalf("token in query: %d, Location %q", st, hdr.Get("Location"))
	}
	resp := http.Response{Header: hdr}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies %v", hdr.Values("Set-Cookie"))
	}
	c := cookies[0]
	if c.Name != "space_token" || c.Value != u.Token || !c.HttpOnly || c.Secure || c.SameSite != http.SameSiteLaxMode ||
		c.Path != "/" || c.Domain != "" || c.MaxAge < 3500 || c.MaxAge > 3600 {
		t.Fatalf("cookie %+v (%q)", c, hdr.Get("Set-Cookie"))
	}
	got = e.echo("GET", e.previewURL(sb.ID, g.port, "/echo/p?b=2"), nil, "Cookie", "space_token="+u.Token+"; app=1")
	if got.Headers.Get("Cookie") != "app=1" {
		t.Fatalf("guest got cookies %q", got.Headers.Get("Cookie"))
	}

	// The owner's key passes and is not forwarded; another tenant's key is 404.
	got = e.echo("GET", echo, nil, "Authorization", "Bearer "+e.aliceKey)
	if got.Headers.Get("Authorization") != "" {
		t.Fatalf("guest got the API key")
	}
	got = e.echo("GET", echo, nil, portproxy.TokenHeader, u.Token, "Authorization", "Basic app")
	if got.Headers.Get("Authorization") != "Basic app" {
		t.Fatalf("guest's own Authorization dropped: %v", got.Headers)
	}
	st, _, b = e.preview("GET", echo, nil, "Authorization", "Bearer "+e.bobKey)
	wantError(t, st, b, 404, "not_found")
	// Another tenant's sandbox is 404 for the key, and the token of one
	// sandbox opens no other.
	bobs := e.running(e.bob, nil)
	st, _, b = e.preview("GET", e.previewURL(bobs.ID, g.port, "/echo/"), nil, "Authorization", "Bearer "+e.aliceKey)
	wantError(t, st, b, 404, "not_found")
	st, _, b = e.preview("GET", e.previewURL(bobs.ID, g.port, "/echo/"), nil, portproxy.TokenHeader, u.Token)
	wantError(t, st, b, 401, "unauthenticated")
	st, _, b = e.preview("GET", e.previewURL("sbx_01jf3k5m7p9r1t3v5x7z9b1d3f", g.port, "/echo/"), nil, portproxy.TokenHeader, u.Token)
	wantError(t, st, b, 404, "not_found")

	// A public URL needs nothing.
	pub := e.portURL(e.aliceKey, sb.ID, closed, `{"public":true,"ttl_seconds":60}`)
	if pub.Token != "" || !pub.Public {
		t.Fatalf("public URL %+v", pub)
	}
	st, _, b = e.preview("GET", e.previewURL(sb.ID, closed, "/"), nil)
	// Nothing listens there: 502 with a JSON body.
	wantError(t, st, b, 502, "failed_precondition")

	// An expired token is 401.
	short := e.portURL(e.aliceKey, sb.ID, g.port, `{"ttl_seconds":1}`)
	testenv.Eventually(t, 5*time.Second, func() error {
		if st, _, _ := e.preview("GET", echo, nil, portproxy.TokenHeader, short.Token); st != 401 {
			return fmt.Errorf("status %d", st)
		}
		return nil
	})

	// Bad requests.
	for _, body := range []string{`{"ttl_seconds":604801}`, `{"ttl_seconds":-1}`, `{"public":"yes"}`, `{"port":1}`} {
		st, _, b = e.do("POST", fmt.Sprintf("/v1/sandboxes/%s/ports/%d/urls", sb.ID, g.port), e.aliceKey, []byte(body))
		wantError(t, st, b, 400, "invalid_argument")
	}
	for _, p := range []string{"0", "65536", "-1", "x", "080"} {
		st, _, b = e.do("POST", "/v1/sandboxes/"+sb.ID+"/ports/"+p+"/urls", e.aliceKey, []byte(`{}`))
		wantError(t, st, b, 400, "invalid_argument")
	}
	st, _, b = e.do("POST", fmt.Sprintf("/v1/sandboxes/%s/ports/%d/urls", bobs.ID, g.port), e.aliceKey, []byte(`{}`))
	wantError(t, st, b, 404, "not_found")
	// A Host under the preview domain that does not parse: 400, no guest.
	before = g.requests.Load()
	for _, h := range []string{"0-" + sb.ID, "99999-" + sb.ID, fmt.Sprint(g.port) + "-sbx_nope", "x.y"} {
		st, _, b = e.preview("GET", fmt.Sprintf("http://%s.localhost:%d/", h, e.http.Listener.Addr().(*net.TCPAddr).Port), nil,
			portproxy.TokenHeader, u.Token)
		wantError(t, st, b, 400, "invalid_argument")
	}
	if g.requests.Load() != before {
		t.Fatal("a malformed host reached the guest")
	}

	// The audit log: who, which port, how many bytes.
	st, _, b = e.do("GET", "/v1/sandboxes/"+sb.ID+"/ports/log", e.aliceKey, nil)
	var log apiv1.PortLog
	if st != 200 || json.Unmarshal(b, &log) != nil || len(log.Records) == 0 {
		t.Fatalf("port log: %d %s", st, b)
	}
	var viaToken, viaKey bool
	for _, r := range log.Records {
		if r.Port != int(g.port) && r.Status == 200 {
			t.Errorf("record of port %d", r.Port)
		}
		viaToken = viaToken || strings.HasPrefix(r.Via, "token:ptk_") && r.Status == 200 && r.BytesIn > 0 && r.BytesOut > 0
		viaKey = viaKey || strings.HasPrefix(r.Via, "key:key_")
	}
	if !viaToken || !viaKey {
		t.Fatalf("port log %+v", log.Records)
	}
	st, _, b = e.do("GET", "/v1/sandboxes/"+sb.ID+"/ports/log", e.bobKey, nil)
	wantError(t, st, b, 404, "not_found")

	// Paused: 409 naming the state. Deleted: 404, its tokens gone.
	ctx := context.Background()
	op, err := e.alice.PauseSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.alice, op, apiv1.OpSucceeded)
	st, _, b = e.preview("GET", echo, nil, portproxy.TokenHeader, u.Token)
	if info := wantError(t, st, b, 409, "conflict"); info.Details["state"] != "paused" {
		t.Fatalf("409 details %v", info.Details)
	}
	op, err = e.alice.DeleteSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.waitOp(e.alice, op, apiv1.OpSucceeded)
	st, _, b = e.preview("GET", echo, nil, portproxy.TokenHeader, u.Token)
	wantError(t, st, b, 404, "not_found")
	if recs, err := e.store.ListPortTokens(ctx, sb.ID); err != nil || len(recs) != 0 {
		t.Fatalf("tokens after delete: %v %v", recs, err)
	}
}

// The store keeps only the token's SHA-256.
func TestPortTokensStoredHashed(t *testing.T) {
	e := newEnv(t, Config{})
	sb := e.running(e.alice, nil)
	u := e.portURL(e.aliceKey, sb.ID, 8080, `{}`)
	recs, err := e.store.ListPortTokens(context.Background(), sb.ID)
	if err != nil || len(recs) != 1 {
		t.Fatalf("%v %v", recs, err)
	}
	sum := sha256.Sum256([]byte(u.Token))
	if recs[0].Hash != hex.EncodeToString(sum[:]) || strings.Contains(fmt.Sprintf("%+v", *recs[0]), u.Token) {
		t.Fatalf("stored %+v", *recs[0])
	}
}

func TestPortProxyStreams(t *testing.T) {
	e := newEnv(t, Config{})
	g := startGuestServer(t)
	sb := e.running(e.alice, nil)
	u := e.portURL(e.aliceKey, sb.ID, g.port, `{}`)

	// A 5 MiB POST arrives whole.
	body := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16)
	sum := sha256.Sum256(body)
	st, _, b := e.preview("POST", e.previewURL(sb.ID, g.port, "/upload"), bytes.NewReader(body), portproxy.TokenHeader, u.Token)
	if want := fmt.Sprintf("%d %s", len(body), hex.EncodeToString(sum[:])); st != 200 || string(b) != want {
		t.Fatalf("upload: %d %q, want %q", st, b, want)
	}

	// SSE: the first line arrives while the guest still holds the last.
	req, _ := http.NewRequest("GET", e.previewURL(sb.ID, g.port, "/sse"), nil)
	req.Header.Set(portproxy.TokenHeader, u.Token)
	resp, err := e.previewClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first SSE line %q %v", line, err)
	}
	close(g.release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "data: last") {
		t.Fatalf("rest %q", rest)
	}

	// A WebSocket echo through the preview host.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(e.previewURL(sb.ID, g.port, "/ws"), "http://", "ws://", 1), &websocket.DialOptions{
		HTTPClient: e.previewClient(), HTTPHeader: http.Header{portproxy.TokenHeader: {u.Token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	for _, msg := range []string{"hello", strings.Repeat("x", 100<<10)} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.Read(ctx)
		if err != nil || string(got) != msg {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

// Request smuggling: Go's server reads a request with both Content-Length
// and Transfer-Encoding by the latter, and the guest gets it framed by the
// proxy, so what hides behind the Content-Length is never a request of its
// own; differing Content-Lengths are refused before any guest.
func TestPortProxySmuggling(t *testing.T) {
	e := newEnv(t, Config{})
	g := startGuestServer(t)
	sb := e.running(e.alice, nil)
	u := e.portURL(e.aliceKey, sb.ID, g.port, `{}`)
	host := strings.Split(e.previewURL(sb.ID, g.port, "/"), "/")[2]
	raw := func(req string) string {
		t.Helper()
		c, err := net.Dial("tcp", e.http.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(c)
		return string(out)
	}
	before := g.requests.Load()
	smuggled := "GET /echo/smuggled HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	out := raw("POST /upload HTTP/1.1\r\nHost: " + host + "\r\n" + portproxy.TokenHeader + ": " + u.Token + "\r\n" +
		"Content-Length: " + strconv.Itoa(len(smuggled)+5) + "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n" + smuggled)
	if !strings.HasPrefix(out, "HTTP/1.1 200") || !strings.Contains(out, "0 e3b0c442") || strings.Contains(out, "smuggled") {
		t.Fatalf("CL+TE answered %q", out)
	}
	if n := g.requests.Load() - before; n != 1 {
		t.Fatalf("the guest got %d requests, want 1", n)
	}
	out = raw("POST /upload HTTP/1.1\r\nHost: " + host + "\r\n" + portproxy.TokenHeader + ": " + u.Token + "\r\n" +
		"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!")
	if !strings.HasPrefix(out, "HTTP/1.1 400") {
		t.Fatalf("differing Content-Length answered %q", out)
	}
	if n := g.requests.Load() - before; n != 1 {
		t.Fatalf("the guest got %d requests, want 1", n)
	}
}

func TestPortProxyPathForm(t *testing.T) {
	e := newEnv(t, Config{})
	g := startGuestServer(t)
	sb := e.running(e.alice, nil)
	base := fmt.Sprintf("/v1/sandboxes/%s/ports/%d/proxy", sb.ID, g.port)
	st, _, b := e.do("GET", base+"/echo/a%2Fb?x=1", e.aliceKey, nil)
	got := decodeEcho(t, st, b)
	if got.URI != "/echo/a%2Fb?x=1" || got.Headers.Get("Authorization") != "" {
		t.Fatalf("guest got %+v", got)
	}
	st, _, b = e.do("PUT", base+"/echo/", e.aliceKey, []byte("x"))
	if got = decodeEcho(t, st, b); got.Method != "PUT" {
		t.Fatalf("guest got %+v", got)
	}
	// The guest's own 404 is its answer, not the API's.
	st, hdr, b := e.do("GET", base+"/nothing-here", e.aliceKey, nil)
	if st != 404 || hdr.Get("Content-Type") == "application/json" || !strings.Contains(string(b), "404 page not found") {
		t.Fatalf("guest 404: %d %v %q", st, hdr, b)
	}
	st, _, b = e.do("GET", base+"/echo/", e.bobKey, nil)
	wantError(t, st, b, 404, "not_found")
	st, _, b = e.do("GET", base+"/echo/", "", nil)
	wantError(t, st, b, 401, "unauthenticated")
	st, _, b = e.do("GET", fmt.Sprintf("/v1/sandboxes/%s/ports/%d/proxy/", sb.ID, closedPort(t)), e.aliceKey, nil)
	wantError(t, st, b, 502, "failed_precondition")

	// The listing sees the server's port.
	st, _, b = e.do("GET", "/v1/sandboxes/"+sb.ID+"/ports", e.aliceKey, nil)
	var list apiv1.PortList
	if st != 200 || json.Unmarshal(b, &list) != nil {
		t.Fatalf("ports: %d %s", st, b)
	}
	found := false
	for _, p := range list.Ports {
		found = found || p.Port == int(g.port) && p.Protocol == "tcp"
	}
	if !found {
		t.Fatalf("port %d not listed: %s", g.port, b)
	}
}

// HTTP/2 in clear (prior knowledge) on the API's own server reaches a
// preview host, a streamed upload included.
func TestPortProxyH2C(t *testing.T) {
	e := newEnv(t, Config{})
	g := startGuestServer(t)
	sb := e.running(e.alice, nil)
	u := e.portURL(e.aliceKey, sb.ID, g.port, `{}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := e.srv.HTTPServer(nil)
	go hs.Serve(e.srv.Listener(ln))
	t.Cleanup(func() { hs.Close() })
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: protocols,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, ln.Addr().String())
		}}}
	body := bytes.Repeat([]byte("h2"), 1<<20)
	sum := sha256.Sum256(body)
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://%d-%s.localhost/upload", g.port, sb.ID), io.MultiReader(bytes.NewReader(body)))
	req.Header.Set(portproxy.TokenHeader, u.Token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if want := fmt.Sprintf("%d %s", len(body), hex.EncodeToString(sum[:])); resp.Proto != "HTTP/2.0" || resp.StatusCode != 200 || string(b) != want {
		t.Fatalf("h2c upload: %s %d %q", resp.Proto, resp.StatusCode, b)
	}
}
