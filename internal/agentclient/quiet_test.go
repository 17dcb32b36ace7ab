package agentclient_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agent"
	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
)

// lockedBuffer is a log sink the agent's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// linkRecords runs two link sessions (a reconnect, as after every restore),
// each with a Configure, against an agent logging at level, and returns
// what the agent logged.
func linkRecords(t *testing.T, level slog.Level) string {
	t.Helper()
	var sink lockedBuffer
	a := agent.New(agent.Config{
		Logger:   slog.New(slog.NewTextHandler(&sink, &slog.HandlerOptions{Level: level})),
		FileRoot: t.TempDir(),
	})
	ln, err := net.Listen("unix", t.TempDir()+"/a.sock")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	served := make(chan struct{})
	go func() { defer close(served); _ = a.ServeListener(ctx, ln) }()
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", ln.Addr().String())
	}, nil)
	for i := range 2 {
		if err := c.Configure(ctx, agentproto.Configure{SandboxID: "sbx_quiet", Env: map[string]string{"N": "x"}}); err != nil {
			t.Fatalf("configure %d: %v", i, err)
		}
		if _, err := c.Ping(ctx); err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		c.Disconnect()
	}
	c.Close()
	cancel()
	<-served
	// The agent logs a session's end once it noticed the client left.
	deadline := time.Now().Add(5 * time.Second)
	for level <= slog.LevelDebug && strings.Count(sink.String(), "agent link down") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return sink.String()
}

// The agent's log is the guest's serial console, whose every line costs
// milliseconds of emulated UART on the wake's critical path: a link session
// and a Configure write nothing at Info, and are still recorded at Debug.
func TestLinkSessionsQuietAtInfo(t *testing.T) {
	if got := linkRecords(t, slog.LevelInfo); got != "" {
		t.Errorf("at Info, two link sessions and Configures logged:\n%s", got)
	}
	got := linkRecords(t, slog.LevelDebug)
	for rec, want := range map[string]int{"agent link up": 2, "agent link down": 2, "msg=configured": 2} {
		if n := strings.Count(got, rec); n != want {
			t.Errorf("at Debug, %q logged %d times, want %d:\n%s", rec, n, want, got)
		}
	}
}
