package remote_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
	"github.com/space-sandbox/space/internal/workerpb/workerpbconnect"
)

// The API tests' worker runs its agent on the host, so its "guest"
// loopback is the host's: these tests dial servers they start on
// 127.0.0.1 through Client → h2c → Server → agent link.

// portRig is a protocol client of the API tests' worker with one sandbox,
// and a count of the DialPort calls the server is serving.
type portRig struct {
	c     *remote.Client
	g     worker.Guest
	open  *atomic.Int32
	ctx   context.Context
	srv   *served
	token remote.Token
}

func newPortRig(t *testing.T) *portRig {
	t.Helper()
	tok := newToken(t)
	open := &atomic.Int32{}
	s := serveWrapped(t, apitest.NewWorker(t), tok, countCalls(workerpbconnect.GuestServiceDialPortProcedure, open))
	ctx := timeout(t, 2*time.Minute)
	c := s.client(t, tok)
	if _, err := c.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_ports", Template: "base", VCPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}
	g, err := c.Agent(ctx, "sbx_ports")
	if err != nil {
		t.Fatal(err)
	}
	return &portRig{c: c, g: g, open: open, ctx: ctx, srv: s, token: tok}
}

// countCalls counts the calls of one procedure the handler is in; a call
// not over HTTP/2 is refused (bidi streams need it).
func countCalls(procedure string, n *atomic.Int32) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 {
				http.Error(w, "not HTTP/2: "+r.Proto, http.StatusHTTPVersionNotSupported)
				return
			}
			if r.URL.Path == procedure {
				n.Add(1)
				defer n.Add(-1)
			}
			h.ServeHTTP(w, r)
		})
	}
}

// waitReleased fails unless the server serves no DialPort call within 10s.
func waitReleased(t *testing.T, open *atomic.Int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d DialPort calls still open on the server", open.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listen starts a loopback server whose connections serve runs; it stops
// with the test.
func listen(t *testing.T, serve func(net.Conn)) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				serve(conn)
			}()
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// Bytes flow both ways; CloseWrite reaches the server as EOF while its
// reply still arrives; a read deadline interrupts a blocked Read and the
// conn works on; Close releases the worker's side.
func TestDialPortRelays(t *testing.T) {
	r := newPortRig(t)
	port := listen(t, func(c net.Conn) {
		got, _ := io.ReadAll(c) // until the client's CloseWrite
		c.Write(append([]byte("got "), got...))
	})
	conn, err := r.g.DialPort(r.ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if conn.RemoteAddr().String() == "" || conn.LocalAddr().Network() == "" {
		t.Errorf("addresses %v %v", conn.LocalAddr(), conn.RemoteAddr())
	}

	// Nothing comes before the half-close: a deadline ends the wait.
	conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var nerr net.Error
	if _, err := conn.Read(make([]byte, 1)); !errors.As(err, &nerr) || !nerr.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v, want a timeout", err)
	}
	conn.SetReadDeadline(time.Time{})

	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("more")); err == nil {
		t.Error("Write after CloseWrite succeeded")
	}
	reply, err := io.ReadAll(conn)
	if err != nil || string(reply) != "got hello" {
		t.Fatalf("reply %q, %v", reply, err)
	}
	waitReleased(t, r.open) // both ways closed: the call ended
	if err := conn.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
}

// A large stream arrives whole in both directions.
func TestDialPortLarge(t *testing.T) {
	r := newPortRig(t)
	data := make([]byte, largePortBytes)
	rand.Read(data)
	port := listen(t, func(c net.Conn) {
		go io.Copy(c, bytes.NewReader(data))
		io.Copy(io.Discard, c)
	})
	conn, err := r.g.DialPort(r.ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %v; equal %v", err, bytes.Equal(got, data))
	}
	if _, err := conn.Write(data); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	waitReleased(t, r.open)
}

// Closing the conn while the guest's server still writes (and the client
// reads nothing) releases the worker's stream (what the agent client does
// with the guest's side then is its own: see agentclient).
func TestDialPortCloseReleases(t *testing.T) {
	r := newPortRig(t)
	port := listen(t, func(c net.Conn) {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	conn, err := r.g.DialPort(r.ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the windows fill: every writer is blocked
	if r.open.Load() != 1 {
		t.Fatalf("%d DialPort calls open, want 1", r.open.Load())
	}
	conn.Close()
	waitReleased(t, r.open)

	// Close while a Read waits for bytes that never come ends the Read and
	// the worker's stream.
	silent := listen(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	conn, err = r.g.DialPort(r.ctx, silent)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		read <- err
	}()
	time.Sleep(100 * time.Millisecond) // the Read waits
	go conn.Close()
	select {
	case err := <-read:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read ended by Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a waiting Read")
	}
	waitReleased(t, r.open)

	// A dial whose ctx ends while the dial waits fails with that ctx's class.
	ctx, cancel := context.WithCancel(r.ctx)
	cancel()
	if _, err := r.g.DialPort(ctx, port); errdefs.ClassOf(err) != errdefs.ErrCancelled {
		t.Errorf("DialPort with an ended ctx: %v, want cancelled", err)
	}
	waitReleased(t, r.open)
}

// A port nothing listens on is a failed precondition; port 0 an invalid
// argument; ListPorts lists a listening port.
func TestDialPortErrors(t *testing.T) {
	r := newPortRig(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ports, err := r.g.ListPorts(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range ports {
		found = found || (p.Port == port && p.Address == "127.0.0.1")
	}
	if !found {
		t.Errorf("ListPorts %+v lacks 127.0.0.1:%d", ports, port)
	}
	ln.Close()
	if _, err := r.g.DialPort(r.ctx, port); errdefs.ClassOf(err) != errdefs.ErrFailedPrecondition {
		t.Errorf("DialPort of a closed port: %v, want failed_precondition", err)
	}
	if _, err := r.g.DialPort(r.ctx, 0); errdefs.ClassOf(err) != errdefs.ErrInvalidArgument {
		t.Errorf("DialPort(0): %v, want invalid_argument", err)
	}
	other, err := r.c.Agent(r.ctx, "sbx_none")
	if err == nil {
		_, err = other.DialPort(r.ctx, port)
	}
	if errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("DialPort in an unknown sandbox: %v, want not_found", err)
	}
	waitReleased(t, r.open)
}

// A port connection whose guest reads nothing stalls only its own stream:
// other calls on the same HTTP/2 connection go on (the connection's
// window covers every stream's).
func TestDialPortStallIsolated(t *testing.T) {
	r := newPortRig(t)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	port := listen(t, func(c net.Conn) {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetReadBuffer(4 << 10)
		}
		<-hold // reads nothing
	})
	conn, err := r.g.DialPort(r.ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wrote := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(conn, io.LimitReader(zeros{}, 64<<20))
		wrote <- n
	}()
	time.Sleep(500 * time.Millisecond) // every buffer on the way fills
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := r.g.Stat(ctx, "/"); err != nil {
			t.Fatalf("call %d beside a stalled port connection: %v", i, err)
		}
	}
	conn.Close()
	select {
	case n := <-wrote:
		if n >= 64<<20 {
			t.Errorf("all %d bytes written to a server that reads nothing", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Write still blocked after Close")
	}
	waitReleased(t, r.open)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Over TLS too a port connection is an HTTP/2 stream (countCalls refuses
// anything else): the server as `spaced worker` serves it, the client as
// a control replica makes it.
func TestDialPortTLS(t *testing.T) {
	// httptest's certificate is for 127.0.0.1.
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	cert, roots := ts.TLS.Certificates, ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	ts.Close()

	tok := newToken(t)
	open := &atomic.Int32{}
	srv, err := remote.NewServer(remote.ServerConfig{Worker: apitest.NewWorker(t), Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	hs := srv.HTTPServer(&tls.Config{Certificates: cert})
	hs.Handler = countCalls(workerpbconnect.GuestServiceDialPortProcedure, open)(hs.Handler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.ServeTLS(ln, "", "")
	t.Cleanup(func() { hs.Close() })
	c, err := remote.NewClient(remote.ClientConfig{Address: ln.Addr().String(), Token: tok, TLS: &tls.Config{RootCAs: roots}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	ctx := timeout(t, time.Minute)
	if _, err := c.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_tls", Template: "base", VCPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}
	g, err := c.Agent(ctx, "sbx_tls")
	if err != nil {
		t.Fatal(err)
	}
	port := listen(t, func(c net.Conn) { io.Copy(c, c) })
	conn, err := g.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, "echo over tls"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("echo over tls"))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "echo over tls" {
		t.Fatalf("echo %q, %v", got, err)
	}
	conn.Close()
	waitReleased(t, open)
}

// BenchmarkPortTunnelHost is BenchmarkPortTunnel without a VM: the API
// tests' worker dials a server on the host, so what is measured is the
// agent link alone (local) against the agent link and the protocol
// (remote), not the guest.
//
//	go test -run '^$' -bench BenchmarkPortTunnelHost ./internal/worker/remote/
func BenchmarkPortTunnelHost(b *testing.B) {
	const bigBytes = 100 << 20
	tok := newToken(b)
	fw := apitest.NewWorker(b)
	c := serve(b, fw, tok).client(b, tok)
	ctx := timeout(b, 10*time.Minute)
	if _, err := fw.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_bench", Template: "base", VCPUs: 1, MemoryMiB: 256}); err != nil {
		b.Fatal(err)
	}
	local, err := fw.Agent(ctx, "sbx_bench")
	if err != nil {
		b.Fatal(err)
	}
	remote, err := c.Agent(ctx, "sbx_bench")
	if err != nil {
		b.Fatal(err)
	}
	big := make([]byte, bigBytes)
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) { w.Write(big) })
	mux.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	ts := httptest.NewServer(mux)
	defer ts.Close()
	port := uint16(ts.Listener.Addr().(*net.TCPAddr).Port)
	for _, via := range []struct {
		name string
		g    worker.Guest
	}{{"local", local}, {"remote", remote}} {
		b.Run("download/"+via.name, func(b *testing.B) {
			hc := httpThrough(via.g, port)
			defer hc.CloseIdleConnections()
			var rates []float64
			b.SetBytes(bigBytes)
			for b.Loop() {
				start := time.Now()
				if n := fetch(b, ctx, hc, "/big"); n != bigBytes {
					b.Fatalf("downloaded %d bytes", n)
				}
				rates = append(rates, bigBytes/(1<<20)/time.Since(start).Seconds())
			}
			b.ReportMetric(median(rates), "MiB/s-median")
		})
		b.Run("request/"+via.name, func(b *testing.B) {
			hc := httpThrough(via.g, port)
			defer hc.CloseIdleConnections()
			fetch(b, ctx, hc, "/small")
			var lat []float64
			for b.Loop() {
				start := time.Now()
				fetch(b, ctx, hc, "/small")
				lat = append(lat, float64(time.Since(start).Microseconds()))
			}
			b.ReportMetric(median(lat), "µs/req-median")
		})
	}
}
