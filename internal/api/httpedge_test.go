package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// edgeServer serves e's API the way spaced does (HTTPServer on Listener) on
// a loopback port and returns its address.
func edgeServer(t *testing.T, e *env) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := e.srv.HTTPServer(nil)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(e.srv.Listener(ln)) }()
	t.Cleanup(func() {
		hs.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// rawConn sends raw on a new connection; every read on it fails after 10 s
// rather than hang the test.
func rawConn(t *testing.T, addr, raw string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// readAnswer reads one response and checks that it is the contract's JSON
// error with status and code.
func readAnswer(t *testing.T, br *bufio.Reader, status int, code string) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	var eb apiv1.ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Message == "" {
		t.Fatalf("%d %q is not a JSON error (%v)", resp.StatusCode, b, err)
	}
	if resp.StatusCode != status || eb.Error.Code != code {
		t.Fatalf("got %d %s (%q), want %d %s", resp.StatusCode, eb.Error.Code, eb.Error.Message, status, code)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id")
	}
	return resp
}

// awaitClosed checks that the server closes c (EOF or reset) before c's
// deadline.
func awaitClosed(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	_, err := br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept the connection open")
	}
	if err == nil {
		t.Fatal("the server sent more on the connection")
	}
}

// TestSlowBodyWithoutKey: a request without a key is answered 401 from its
// headers, at once, without waiting for a body that does not come.
func TestSlowBodyWithoutKey(t *testing.T) {
	e := newEnv(t, Config{}) // BodyTimeout 30 s: longer than rawConn waits
	addr := edgeServer(t, e)
	c, br := rawConn(t, addr, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	resp := readAnswer(t, br, http.StatusUnauthorized, "unauthenticated")
	if !resp.Close {
		t.Error("the connection is kept for a body nobody will read")
	}
	awaitClosed(t, c, br)
}

// TestSlowBodyIsCut: a JSON body that is not in within BodyTimeout ends its
// request and its connection; a bodyless or complete request may then run
// longer than that.
func TestSlowBodyIsCut(t *testing.T) {
	e := newEnv(t, Config{BodyTimeout: 300 * time.Millisecond})
	addr := edgeServer(t, e)
	c, br := rawConn(t, addr, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+e.bobKey+
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	readAnswer(t, br, http.StatusRequestTimeout, "deadline_exceeded")
	awaitClosed(t, c, br)

	// The deadline goes once the body is in: an exec that runs longer
	// than BodyTimeout is not cut, on a kept-alive connection.
	sb := e.running(e.bob, nil)
	body := `{"shell":"sleep 1; echo done"}`
	req := fmt.Sprintf("POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", sb.ID, e.bobKey, len(body), body)
	_, br = rawConn(t, addr, req+req)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("exec %d: %v", i, err)
		}
		var out apiv1.ExecResponse
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || out.Stdout != "done\n" {
			t.Fatalf("exec %d: %d %+v %v", i, resp.StatusCode, out, err)
		}
	}
}

// TestUploadProgressDeadline: an upload may take longer than BodyTimeout
// while it keeps arriving; one that stalls for UploadIdleTimeout is cut.
func TestUploadProgressDeadline(t *testing.T) {
	e := newEnv(t, Config{BodyTimeout: 200 * time.Millisecond, UploadIdleTimeout: 2 * time.Second})
	addr := edgeServer(t, e)
	sb := e.running(e.bob, nil)
	head := func(path string, n int) string {
		return fmt.Sprintf("PUT /v1/sandboxes/%s/files?path=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", sb.ID, path, e.bobKey, n)
	}

	// Five chunks, 150 ms apart: about four BodyTimeouts in all.
	c, br := rawConn(t, addr, head("/tmp/slow", 5))
	for range 5 {
		time.Sleep(150 * time.Millisecond) // the pace of a slow client, not a wait for a condition
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("slow upload: %d", resp.StatusCode)
	}
	if b, err := os.ReadFile(e.worker.VM(sb.ID).Root + "/tmp/slow"); err != nil || string(b) != "xxxxx" {
		t.Fatalf("uploaded %q, %v", b, err)
	}

	// A stalled upload is cut (rawConn's reads give up after 10 s).
	c, br = rawConn(t, addr, head("/tmp/stalled", 100)+"x")
	readAnswer(t, br, http.StatusRequestTimeout, "deadline_exceeded")
	awaitClosed(t, c, br)
}

// TestErrorsAreJSON: what the mux answers itself and what Go's server
// rejects before any handler runs are the contract's JSON errors too.
func TestErrorsAreJSON(t *testing.T) {
	e := newEnv(t, Config{})
	addr := edgeServer(t, e)
	auth := "Authorization: Bearer " + e.bobKey + "\r\n"
	for _, tc := range []struct {
		name, raw string
		status    int
		code      string
	}{
		{"unknown route", "GET /v1/nope HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 404, "not_found"},
		{"unknown route outside v1", "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not_found"},
		{"unknown route with a body", "POST /v1/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{", 404, "not_found"},
		{"wrong method", "PATCH /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 405, "invalid_argument"},
		{"asterisk target", "GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_argument"},
		{"bad percent-encoding", "GET /v1/sandboxes/%zz HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 400, "invalid_argument"},
		{"NUL in a header", "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n" + auth + "\r\n", 400, "invalid_argument"},
		{"bad Content-Length", "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n" + auth + "\r\n", 400, "invalid_argument"},
		{"no Host", "GET /v1/sandboxes HTTP/1.1\r\n" + auth + "\r\n", 400, "invalid_argument"},
		{"malformed request line", "GARBAGE\r\n\r\n", 400, "invalid_argument"},
		{"headers too large", "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", 431, "payload_too_large"},
		{"unknown transfer encoding", "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: rot13\r\n" + auth + "\r\n", 501, "invalid_argument"},
		{"unsupported version", "GET /v1/sandboxes HTTP/2.5\r\nHost: x\r\n\r\n", 505, "invalid_argument"},
		{"unknown expectation", "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n" + auth + "\r\n", 417, "invalid_argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, br := rawConn(t, addr, tc.raw)
			resp := readAnswer(t, br, tc.status, tc.code)
			if tc.status == 405 && resp.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}

	// A reject after a served request on the same connection is JSON too.
	t.Run("after a kept-alive request", func(t *testing.T) {
		_, br := rawConn(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /%zz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		readAnswer(t, br, 400, "invalid_argument")
	})
}

// TestHandlerAnswersAreNotRewritten: a file whose content looks like one of
// Go's rejects comes back as it is (the edge rewrites only what Go's server
// writes while no handler serves the connection).
func TestHandlerAnswersAreNotRewritten(t *testing.T) {
	e := newEnv(t, Config{})
	addr := edgeServer(t, e)
	sb := e.running(e.bob, nil)
	content := "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
	os.MkdirAll(e.worker.VM(sb.ID).Root+"/tmp", 0o755)
	if err := os.WriteFile(e.worker.VM(sb.ID).Root+"/tmp/looks", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	_, br := rawConn(t, addr, fmt.Sprintf("GET /v1/sandboxes/%s/files?path=/tmp/looks HTTP/1.1\r\nHost: x\r\n"+
		"Authorization: Bearer %s\r\n\r\n", sb.ID, e.bobKey))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != content {
		t.Fatalf("got %d %q", resp.StatusCode, b)
	}
}
