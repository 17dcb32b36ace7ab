package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// guestStatus reads the proxy's answer on c in the background: its status
// line, or what the read failed with (hangGuard bounds the wait).
func guestStatus(c net.Conn, hangGuard time.Duration) <-chan string {
	out := make(chan string, 1)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(hangGuard))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			out <- "no answer: " + err.Error()
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		// After the answer the proxy closes (a reset after the FIN is
		// fine: the guest kept sending).
		if _, err := br.ReadByte(); err == nil {
			out <- resp.Status + " and the connection stayed open"
			return
		}
		out <- resp.Status
	}()
	return out
}

// TestEndlessRequestHeader: a guest streaming one header line that never
// ends is answered 431 and closed once the header passes MaxHeaderBytes,
// instead of the proxy reading (and holding) all it sends.
func TestEndlessRequestHeader(t *testing.T) {
	e := newEnv(t, allowAllowed)
	c, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":80")
	must(t, err)
	defer c.Close()
	status := guestStatus(c, 30*time.Second)
	_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Endless: ")
	must(t, err)
	chunk := bytes.Repeat([]byte("a"), 32<<10)
	const most = 64 << 20
	written := 0
	for written < most {
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Write(chunk)
		written += n
		if err != nil {
			break
		}
	}
	if got := <-status; got != "431 Request Header Fields Too Large" {
		t.Fatalf("after %d MiB of one header: %s; want 431 and a close", written>>20, got)
	}
	if written >= most {
		t.Fatalf("the proxy took %d MiB of one header", written>>20)
	}
	if r := e.lastRecord("http"); r.Rule != "request header too large" || r.Allowed {
		t.Fatalf("audit %+v", r)
	}
	t.Logf("guest wrote %.1f MiB before the proxy closed (kernel buffers included)", float64(written)/(1<<20))
}

// TestSlowRequestHeader: a guest dripping a header one byte at a time is
// answered 408 and closed HeaderTimeout after the request began, however
// often it sends; a kept-alive connection may still idle longer than that
// between requests.
func TestSlowRequestHeader(t *testing.T) {
	const headerTimeout = 300 * time.Millisecond
	e := newEnvWith(t, allowAllowed, func(_ *env, c *Config) { c.HeaderTimeout = headerTimeout })

	c, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":80")
	must(t, err)
	defer c.Close()
	status := guestStatus(c, 30*time.Second)
	drip := make(chan struct{})
	go func() {
		defer close(drip)
		for _, b := range []byte("GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Slow: ") {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
		}
		for {
			if _, err := c.Write([]byte("a")); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond) // the slow guest's pace
		}
	}()
	if got := <-status; got != "408 Request Timeout" {
		t.Fatalf("dripped header: %s; want 408 and a close", got)
	}
	<-drip
	if r := e.lastRecord("http"); r.Rule != "request header timeout" {
		t.Fatalf("audit %+v", r)
	}

	// Idle between requests is not a slow header.
	k, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":80")
	must(t, err)
	defer k.Close()
	_ = k.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(k)
	for i := range 2 {
		fmt.Fprintf(k, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on a kept-alive connection: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %s", i, resp.Status)
		}
		time.Sleep(3 * headerTimeout) // idle, longer than a header may take
	}
}

// TestEndlessUpstreamResponseHeader: an allowed upstream streaming a
// response header that never ends gets the guest a 502 once it passes
// MaxHeaderBytes, not a proxy reading it forever.
func TestEndlessUpstreamResponseHeader(t *testing.T) {
	e := newEnv(t, allowAllowed)
	const port = 8081
	e.serveIn(e.addrA, port, "tcp", func(l net.Listener) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				// 8 MiB of one header line, then a wait for more that
				// never comes: a proxy reading it all never answers.
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Endless: ")
				chunk := bytes.Repeat([]byte("b"), 32<<10)
				for sent := 0; sent < 8<<20; sent += len(chunk) {
					_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
				_, _ = io.Copy(io.Discard, c) // until the proxy closes
			}()
		}
	})
	c, err := e.dial(context.Background(), "tcp4", fmt.Sprintf("%s:%d", e.addrA, port))
	must(t, err)
	defer c.Close()
	status := guestStatus(c, 30*time.Second)
	_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	must(t, err)
	if got := <-status; got != "502 Bad Gateway" {
		t.Fatalf("endless upstream header: %s; want 502", got)
	}
}

// TestPeekSNIRefusesOversizedRecord: a TLS record longer than any
// ClientHello's is refused from its header, without waiting for (or
// buffering) its body.
func TestPeekSNIRefusesOversizedRecord(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte{0x16, 3, 1, 0x80, 0x00}) // 32 KiB announced, never sent
	done := make(chan error, 1)
	go func() {
		_, err := peekSNI(bufio.NewReaderSize(pr, 64<<10))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errHelloRecord) {
			t.Fatalf("peekSNI: %v, want errHelloRecord", err)
		}
	case <-time.After(10 * time.Second): // a hang guard
		pw.Close()
		t.Fatal("peekSNI waited for the body of a record no ClientHello comes in")
	}
}
