package remote_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/workerpb/workerpbconnect"
)

// httpdSandbox creates a sandbox on w running `busybox httpd` on port 8080
// over /tmp/www (a tmpfs of half its memory), which holds the given files,
// and waits until the port listens.
func httpdSandbox(t testing.TB, ctx context.Context, w worker.Worker, id string, memoryMiB int, files map[string][]byte) worker.Guest {
	t.Helper()
	if _, err := w.CreateSandbox(ctx, worker.SandboxSpec{ID: id, Template: "base", VCPUs: 1, MemoryMiB: memoryMiB}); err != nil {
		t.Fatal(err)
	}
	g, err := w.Agent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if _, err := g.WriteFile(ctx, "/tmp/www/"+name, 0o644, int64(len(data)), bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Start(ctx, agentproto.ProcessSpec{ID: "httpd",
		Argv: []string{"busybox", "httpd", "-f", "-p", "8080", "-h", "/tmp/www"}}); err != nil {
		t.Fatal(err)
	}
	for {
		ports, err := g.ListPorts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(ports, func(p agentproto.ListeningPort) bool { return p.Port == 8080 }) {
			return g
		}
		select {
		case <-ctx.Done():
			t.Fatalf("httpd does not listen: %+v", ports)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// httpThrough is an HTTP client whose connections are g's port connections.
func httpThrough(g worker.Guest, port uint16) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return g.DialPort(ctx, port) },
	}}
}

// Ports through the protocol with a real VM: Client → h2c → Server → the
// local worker → the agent link → busybox httpd in the guest.
func TestPortsLocal(t *testing.T) {
	lw := newLocalWorker(t)
	tok := newToken(t)
	open := &atomic.Int32{}
	c := serveWrapped(t, lw, tok, countCalls(workerpbconnect.GuestServiceDialPortProcedure, open)).client(t, tok)
	ctx := timeout(t, 5*time.Minute)
	big := make([]byte, 20<<20)
	rand.Read(big)
	g := httpdSandbox(t, ctx, c, "sbx_ports_local", 256, map[string][]byte{"index.html": []byte("hello from the guest\n"), "big": big})

	ports, err := g.ListPorts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := lw.Agent(ctx, "sbx_ports_local")
	if err != nil {
		t.Fatal(err)
	}
	if want, err := direct.ListPorts(ctx); err != nil || !slices.Equal(ports, want) {
		t.Errorf("ListPorts through the protocol %+v, the worker's own %+v (%v)", ports, want, err)
	}

	hc := httpThrough(g, 8080)
	get := func(path string) []byte {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://sandbox"+path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
		}
		return body
	}
	if got := get("/index.html"); string(got) != "hello from the guest\n" {
		t.Errorf("GET /index.html = %q", got)
	}
	if got := get("/big"); !bytes.Equal(got, big) {
		t.Errorf("GET /big: %d bytes, equal %v", len(got), bytes.Equal(got, big))
	}

	// Half-close: the request, then CloseWrite; the reply still arrives.
	conn, err := g.DialPort(ctx, 8080)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(conn, "GET /index.html HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	reply, err := io.ReadAll(conn)
	conn.Close()
	if err != nil || !strings.HasPrefix(string(reply), "HTTP/1.") || !strings.HasSuffix(string(reply), "hello from the guest\n") {
		t.Errorf("reply after CloseWrite %q, %v", reply, err)
	}

	if _, err := g.DialPort(ctx, 8081); errdefs.ClassOf(err) != errdefs.ErrFailedPrecondition {
		t.Errorf("DialPort of a port nothing listens on: %v, want failed_precondition", err)
	}

	// A conn closed mid-download releases its stream on the worker.
	conn, err = g.DialPort(ctx, 8080)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /big HTTP/1.0\r\n\r\n")
	if _, err := io.ReadFull(conn, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	hc.CloseIdleConnections()
	waitReleased(t, open)
	if err := c.DeleteSandbox(ctx, "sbx_ports_local"); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkPortTunnel measures the cost of the worker protocol on a port
// connection: the same guest's busybox httpd through the local worker's
// Guest.DialPort and through the protocol's client (loopback h2c). It
// reports the median MiB/s of b.N downloads of a 100 MiB file, and the
// median latency of b.N small GETs (busybox httpd closes each connection:
// a dial each). Run it as
//
//	go test -run '^$' -bench BenchmarkPortTunnel/download -benchtime 5x ./internal/worker/remote/
func BenchmarkPortTunnel(b *testing.B) {
	lw := newLocalWorker(b)
	tok := newToken(b)
	c := serve(b, lw, tok).client(b, tok)
	ctx := timeout(b, 30*time.Minute)
	const bigBytes = 100 << 20
	local := httpdSandbox(b, ctx, lw, "sbx_ports_bench", 512, map[string][]byte{"small": []byte("ok\n")})
	runGuest(b, ctx, local, "dd", "if=/dev/urandom", "of=/tmp/www/big", "bs=1M", fmt.Sprintf("count=%d", bigBytes>>20))
	remote, err := c.Agent(ctx, "sbx_ports_bench")
	if err != nil {
		b.Fatal(err)
	}
	for _, via := range []struct {
		name string
		g    worker.Guest
	}{{"local", local}, {"remote", remote}} {
		b.Run("download/"+via.name, func(b *testing.B) {
			hc := httpThrough(via.g, 8080)
			defer hc.CloseIdleConnections()
			var rates []float64
			b.SetBytes(bigBytes)
			for b.Loop() {
				start := time.Now()
				n := fetch(b, ctx, hc, "/big")
				if n != bigBytes {
					b.Fatalf("downloaded %d bytes", n)
				}
				rates = append(rates, float64(n)/(1<<20)/time.Since(start).Seconds())
			}
			b.ReportMetric(median(rates), "MiB/s-median")
		})
		b.Run("request/"+via.name, func(b *testing.B) {
			hc := httpThrough(via.g, 8080)
			defer hc.CloseIdleConnections()
			fetch(b, ctx, hc, "/small") // the connection, kept alive
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

func fetch(b *testing.B, ctx context.Context, hc *http.Client, path string) int64 {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://sandbox"+path, nil)
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatal(fmt.Errorf("GET %s: %d, %w", path, resp.StatusCode, err))
	}
	return n
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// runGuest runs argv in g to its end and fails unless it exits 0.
func runGuest(t testing.TB, ctx context.Context, g worker.Guest, argv ...string) {
	t.Helper()
	id := fmt.Sprintf("run-%d", time.Now().UnixNano())
	if _, err := g.Start(ctx, agentproto.ProcessSpec{ID: id, Argv: argv}); err != nil {
		t.Fatal(err)
	}
	events, err := g.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	for {
		ev, err := events.Next()
		if err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
		if ev.Type == agentproto.EventExit {
			if ev.Exit == nil || ev.Exit.ExitCode == nil || *ev.Exit.ExitCode != 0 {
				t.Fatalf("%v exited %+v", argv, ev.Exit)
			}
			return
		}
	}
}
