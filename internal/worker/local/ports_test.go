package local_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/worker"
)

// TestPortTunnel: a server in a real guest, behind a deny-by-default
// egress policy, is listed by ListPorts and reached by DialPort over the
// agent link.
func TestPortTunnel(t *testing.T) {
	e := newEnv(t)
	e.withNetwork("tport")
	w := e.open()
	t.Cleanup(func() { cleanupAll(t, w) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	s := spec("sbx_port1")
	s.Network = json.RawMessage(`{"egress":{"default":"deny"}}`)
	if _, err := w.CreateSandbox(ctx, s); err != nil {
		t.Fatal(err)
	}
	c := agent(t, w, "sbx_port1")
	if code := sh(t, c, "mkdir -p /tmp/www && echo hello-through-the-tunnel > /tmp/www/index.html"); code != 0 {
		t.Fatalf("write the page: exit %d", code)
	}
	if _, err := c.Start(ctx, agentproto.ProcessSpec{ID: "httpd", Argv: []string{"busybox", "httpd", "-f", "-p", "8080", "-h", "/tmp/www"}}); err != nil {
		t.Fatal(err)
	}
	awaitPort(t, ctx, c, 8080)

	conn, err := c.DialPort(ctx, 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, "GET /index.html HTTP/1.0\r\nHost: sandbox\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read the answer: %v (got %q)", err, resp)
	}
	if !strings.HasPrefix(string(resp), "HTTP/1.") || !strings.Contains(string(resp), " 200 ") ||
		!strings.Contains(string(resp), "hello-through-the-tunnel") {
		t.Fatalf("answer through the tunnel: %q", resp)
	}

	// Nothing listens on another port.
	if _, err := c.DialPort(ctx, 8081); err == nil || !strings.Contains(err.Error(), "nothing listens on port 8081") {
		t.Fatalf("dial a port nobody listens on: %v", err)
	}
}

// awaitPort waits until the guest lists a socket listening on port.
func awaitPort(t *testing.T, ctx context.Context, g worker.Guest, port uint16) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ports, err := g.ListPorts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if p.Port == port {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("port %d not listening after 30s: %v", port, ports)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
