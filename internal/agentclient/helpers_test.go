package agentclient_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agent"
	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
)

// requireRoot skips tests that need root (process credentials, chown).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent runs processes as other users and chowns files")
	}
}

// testEnv is an agent in test mode on a unix socket, and a client for it.
type testEnv struct {
	c    *agentclient.Client
	root string // the agent's "/" for file operations
	sock string

	mu       sync.Mutex
	last     net.Conn // the client's current link, for dropping it
	dials    int
	preamble []byte // written on each new link before the handshake
}

func newEnv(t testing.TB) *testEnv {
	t.Helper()
	e := &testEnv{root: t.TempDir()}
	dir, err := os.MkdirTemp("", "agent-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e.sock = filepath.Join(dir, "a.sock")
	ln, err := net.Listen("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a := agent.New(agent.Config{Logger: log, FileRoot: e.root})
	ctx, cancel := context.WithCancel(context.Background())
	go a.ServeListener(ctx, ln)
	e.c = agentclient.New(e.dial, log)
	t.Cleanup(func() {
		// Kill whatever a test left running, by its process group.
		kctx, kcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer kcancel()
		if ps, err := e.c.List(kctx); err == nil {
			for _, p := range ps {
				if p.State == agentproto.StateRunning {
					_ = e.c.Signal(kctx, p.ID, "SIGKILL")
				}
			}
		}
		e.c.Close()
		cancel()
	})
	return e
}

func (e *testEnv) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", e.sock)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.preamble) > 0 {
		if _, err := conn.Write(e.preamble); err != nil {
			conn.Close()
			return nil, err
		}
	}
	e.last = conn
	e.dials++
	return conn, nil
}

// drop cuts the current link under the client's feet.
func (e *testEnv) drop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last != nil {
		e.last.Close()
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// result is everything a process's event stream said.
type result struct {
	events []agentproto.Event
	stdout bytes.Buffer
	stderr bytes.Buffer
	exit   *agentproto.ExitStatus
}

func collect(t testing.TB, ctx context.Context, c *agentclient.Client, id string, after uint64) *result {
	t.Helper()
	s, err := c.Events(ctx, id, after)
	if err != nil {
		t.Fatalf("events %s: %v", id, err)
	}
	defer s.Close()
	return drain(t, s)
}

func drain(t testing.TB, s agentproto.EventStream) *result {
	t.Helper()
	r := &result{}
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return r
		}
		if err != nil {
			t.Fatalf("next event: %v", err)
		}
		r.add(ev)
	}
}

func (r *result) add(ev agentproto.Event) {
	r.events = append(r.events, ev)
	switch ev.Type {
	case agentproto.EventStdout:
		r.stdout.Write(ev.Data)
	case agentproto.EventStderr:
		r.stderr.Write(ev.Data)
	case agentproto.EventExit:
		r.exit = ev.Exit
	}
}

// run starts spec and collects all its events.
func run(t testing.TB, ctx context.Context, c *agentclient.Client, spec agentproto.ProcessSpec) *result {
	t.Helper()
	if _, err := c.Start(ctx, spec); err != nil {
		t.Fatalf("start %s: %v", spec.ID, err)
	}
	return collect(t, ctx, c, spec.ID, 0)
}

func checkSeqs(t testing.TB, evs []agentproto.Event, from uint64) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != from+uint64(i) {
			t.Fatalf("event %d has seq %d, want %d", i, ev.Seq, from+uint64(i))
		}
	}
}

func exitCode(t testing.TB, r *result) int {
	t.Helper()
	if r.exit == nil || r.exit.ExitCode == nil {
		t.Fatalf("no exit code: %+v", r.exit)
	}
	return *r.exit.ExitCode
}
