package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/space-sandbox/space/internal/api/apiv1"
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
